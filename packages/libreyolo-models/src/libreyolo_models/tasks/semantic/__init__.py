"""Semantic segmentation: mask files and their reader, paired augmentation and pipeline, mIoU and
``Results.masks`` as a class map (``task.SemanticTask`` is the declaration the jobs call)."""
