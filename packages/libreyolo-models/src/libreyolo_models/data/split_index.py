"""The contract between dataset readers and the training/validation pipelines.

A reader (YOLO ``data.yaml`` trees, image-list ``.txt`` files, COCO JSON) turns one split into a
``SplitIndex``: image paths, their labels and sizes, already checked. Everything downstream (the
image cache, augmentation, loaders, validation) reads only this, never the files' formats.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class DataProblem:
    """One file that could not be used as-is: where it is, and why (shown to the user)."""

    path: Path
    reason: str
    skipped: bool = True  # False: the file is used, but something was fixed or assumed


@dataclass(frozen=True)
class SplitIndex:
    """One checked split.

    Attributes:
        name: split name (``train``, ``val``, ``test``).
        images: image file paths, in a stable order.
        labels: per image, ``float32 [n, 5]`` rows of (class, cx, cy, w, h), box values normalized
            to [0, 1] of the original image; ``n`` may be 0 (a background image).
        sizes: per image, the original ``(height, width)`` in pixels.
        names: class id -> class name, ids ``0 .. nc-1``.
        problems: files skipped or fixed while reading, each with its reason.
        source: where the split came from (a ``data.yaml`` path or a description), for messages.
    """

    name: str
    images: list[Path]
    labels: list[np.ndarray]
    sizes: list[tuple[int, int]]
    names: dict[int, str]
    problems: list[DataProblem] = field(default_factory=list)
    source: str = ""

    def __len__(self) -> int:
        return len(self.images)

    @property
    def nc(self) -> int:
        return len(self.names)

    def n_instances(self) -> int:
        return int(sum(len(lab) for lab in self.labels))
