"""Validation: COCO-style matching per image (``val.matching``) and the metrics over a whole,
possibly sharded, validation set (``val.metrics``)."""
