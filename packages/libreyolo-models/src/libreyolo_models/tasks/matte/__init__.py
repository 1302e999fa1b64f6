"""Alpha matting (``matte``): a soft foreground alpha per picture, its cut-out, MAE / S-measure / maxF."""
