"""ConvNeXt image classifiers (torchvision's architecture): sizes tiny, small, base."""
