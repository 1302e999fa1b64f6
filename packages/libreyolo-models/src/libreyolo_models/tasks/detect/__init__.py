"""Object detection: its data readers and batch pipeline, metrics, validation artefacts and
``Results.boxes`` (``task.DetectTask`` is the declaration the jobs call)."""
