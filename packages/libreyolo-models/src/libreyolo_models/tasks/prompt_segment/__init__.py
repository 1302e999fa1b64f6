"""Promptable segmentation (``prompt-segment``): masks for the objects a user points at or boxes, with their predicted IoU (SAM; inference only)."""
