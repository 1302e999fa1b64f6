"""Promptable segmentation (``prompt-segment``): masks for the objects a user points at or boxes,
with their predicted IoU; validation by box prompts (mIoU). SAM; pretrained-only."""
