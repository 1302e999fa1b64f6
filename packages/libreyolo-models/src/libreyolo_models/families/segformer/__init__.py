"""SegFormer (b0-b5): a Mix Transformer encoder and an all-MLP decoder for semantic segmentation."""
