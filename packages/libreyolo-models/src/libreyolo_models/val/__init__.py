"""The validation job: options resolved once, the model's task evaluates (its metrics live with
the task: ``tasks.detect.metrics``, ``tasks.classify.metrics``, ``tasks.semantic.metrics``)."""
