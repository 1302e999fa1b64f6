"""ResNet image classifiers (torchvision's architecture): sizes 18, 34, 50, 101."""
