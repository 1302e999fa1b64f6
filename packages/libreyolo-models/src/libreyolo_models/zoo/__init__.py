"""The zoo: the registry of families (one literal table) and how a model source (a name, a
file, an architecture spec) becomes a family, a size, a task and weights. Above the families,
below the tasks and jobs."""
