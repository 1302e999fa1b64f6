"""RF-DETR: a detection transformer on a windowed DINOv2 backbone (LW-DETR decoder, two-stage queries)."""
