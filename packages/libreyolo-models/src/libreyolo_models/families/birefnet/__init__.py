"""BiRefNet: bilateral-reference dichotomous segmentation / matting (Swin backbone, deformable decoder)."""
