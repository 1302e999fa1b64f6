"""Point detection (``point``): one centroid per object with its class and score; P / R / F1 of matched centroids."""
