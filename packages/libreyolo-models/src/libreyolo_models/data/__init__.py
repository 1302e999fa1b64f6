"""Datasets, label checking, the bundled ``shapes`` set, the image cache and augmentation."""
