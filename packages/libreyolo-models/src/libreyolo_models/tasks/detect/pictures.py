"""``val_batch*_pred.jpg``: a validation batch as the network saw it, with its predictions drawn
(the grid ``tasks.plots.plot_batch`` draws the labels in, so the two pictures line up)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import Tensor

from ..drawing import draw_detections

PREDICTION_CONF = 0.25   # what predict shows by default, so the pictures look like predict's


def plot_predictions(images: Tensor, detections: list[Tensor], names: Mapping[int, str], path: Path, *,
                     conf: float = PREDICTION_CONF, max_images: int = 16) -> Path:
    """The first ``max_images`` of a batch (``float [B, 3, H, W]`` in [0, 1]) on a grid, each with
    its detections (``[N, 6]`` xyxy in input pixels, score, class) scoring at least ``conf``, scores written."""
    images = images[:max_images].detach().float().cpu()
    b, _, h, w = images.shape
    cols = math.ceil(math.sqrt(b))
    canvas = np.full((math.ceil(b / cols) * h, cols * w, 3), 114, np.uint8)
    for i in range(b):
        tile = (images[i].permute(1, 2, 0).clamp(0, 1) * 255 + 0.5).to(torch.uint8).numpy()
        shown = detections[i].detach().float().cpu()
        tile = draw_detections(tile, shown[shown[:, 4] >= conf], dict(names), conf=True, line_width=1)
        r, c = divmod(i, cols)
        canvas[r * h:(r + 1) * h, c * w:(c + 1) * w] = tile
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(canvas).save(path, quality=90)
    return path
