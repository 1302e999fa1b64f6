"""``val_batch*_pred.jpg``: a validation batch as the network saw it, with its predictions drawn
(the grid ``tasks.plots.plot_batch`` draws the labels in, so the two pictures line up)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
from torch import Tensor

from ..drawing import draw_detections, save_grid

PREDICTION_CONF = 0.25   # what predict shows by default, so the pictures look like predict's


def plot_predictions(images: Tensor, detections: list[Tensor], names: Mapping[int, str], path: Path, *,
                     conf: float = PREDICTION_CONF, max_images: int = 16) -> Path:
    """The first ``max_images`` of a batch (``float [B, 3, H, W]`` in [0, 1]) on a grid, each with
    its detections (``[N, 6]`` xyxy in input pixels, score, class) scoring at least ``conf``, scores written."""
    images = images[:max_images].detach().float().cpu()
    tiles = []
    for i in range(images.shape[0]):
        tile = (images[i].permute(1, 2, 0).clamp(0, 1) * 255 + 0.5).to(torch.uint8).numpy()
        shown = detections[i].detach().float().cpu()
        tiles.append(draw_detections(tile, shown[shown[:, 4] >= conf], dict(names), conf=True, line_width=1))
    return save_grid(tiles, path)
