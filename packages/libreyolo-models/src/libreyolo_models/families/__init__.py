"""One folder per family; the registry (``libreyolo_models.zoo.registry``) lists them all."""
