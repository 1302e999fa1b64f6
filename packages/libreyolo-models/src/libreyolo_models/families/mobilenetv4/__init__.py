"""MobileNetV4 image classifiers, the convolutional variants: sizes small, medium, large."""
