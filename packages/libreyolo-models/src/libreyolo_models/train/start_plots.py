"""Pictures written when training starts (rank 0, ``plots=True``): ``labels.jpg``, an overview of
the training labels, and ``train_batch0..2.jpg``, the first batches as the network sees them
after augmentation with their targets drawn on. They answer "are my labels and augmentation
what I think" before hours of training."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..tasks.plots import plot_batch, plot_labels

log = logging.getLogger(__name__)


def plot_start_of_training(index: Any, names: Mapping[int, str], run_dir: Path) -> Path | None:
    """``labels.jpg`` from a split whose ``labels`` are per-image ``[n, 5]`` box rows (detect);
    other tasks' splits (masks) have no box overview, so nothing is written for them."""
    labels = getattr(index, "labels", None)
    if not isinstance(labels, list) or not all(isinstance(lab, np.ndarray) and lab.ndim == 2 and lab.shape[1] == 5
                                               for lab in labels):
        return None
    return _guarded(lambda: plot_labels(labels, names, run_dir / "labels.jpg"), "labels.jpg")


def plot_train_batch(batch: Any, names: Mapping[int, str], path: Path) -> Path | None:
    """One training batch with its box targets (an instance task's: their boxes; images only when
    the targets are not boxes)."""
    targets = getattr(batch.targets, "boxes", batch.targets)
    return _guarded(lambda: plot_batch(batch.images, targets, names, path), path.name)


def _guarded(draw: Any, what: str) -> Path | None:
    """A picture is never worth a training run: a plotting failure is logged and skipped."""
    try:
        return draw()
    except Exception as err:  # noqa: BLE001 - plots are a convenience, training goes on
        log.warning("could not draw %s: %s: %s", what, type(err).__name__, err)
        return None
