"""Image classification: ImageFolder-style data, its augmentation and pipeline, top-k metrics and
``Results.probs`` (``task.ClassifyTask`` is the declaration the jobs call)."""
