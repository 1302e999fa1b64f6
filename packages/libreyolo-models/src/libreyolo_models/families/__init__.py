"""One folder per family; the registry (``libreyolo_models.registry``) lists them all."""
