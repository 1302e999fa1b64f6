"""Depth Anything V2 (Yang et al., 2024): relative monocular depth from a DINOv2 encoder and a DPT head."""
