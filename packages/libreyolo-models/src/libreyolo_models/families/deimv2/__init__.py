"""DEIMv2: DEIM with DINOv3-style ViT backbones (s-x) or tiny HGNetv2 ones (atto-n) and an RMSNorm decoder."""
