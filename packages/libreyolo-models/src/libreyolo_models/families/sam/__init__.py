"""Segment Anything (SAM): a promptable segmenter, ViT-B / L / H, in Meta's checkpoint layout."""
