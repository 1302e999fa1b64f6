"""FOMO ("Faster Objects, More Objects"): per-cell class heatmaps at 1/8 resolution for object centroids."""
