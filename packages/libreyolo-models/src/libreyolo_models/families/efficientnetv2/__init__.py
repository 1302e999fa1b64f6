"""EfficientNetV2 image classifiers, the small B-variants: sizes b0, b1, b2, b3."""
