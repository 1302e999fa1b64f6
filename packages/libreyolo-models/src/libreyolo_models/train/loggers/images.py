"""The few prediction images loggers show each epoch: the EMA model on the first validation
images, drawn the way ``Results.plot`` draws them (boxes for detect, class tints for semantic)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    from ...handle import ModelHandle

N_IMAGES = 4
SCORE_THRESHOLD = 0.25  # what predict shows by default, so the images look like predict's


def first_images(val_data: Any, n: int = N_IMAGES) -> tuple[Tensor, list[str]]:
    """The first ``n`` validation images (``float [n, 3, S, S]`` on the CPU) and their names."""
    batch = next(iter(val_data))
    paths = list(getattr(batch, "paths", []) or [f"val{i}" for i in range(len(batch.images))])
    return batch.images[:n].detach().float().cpu(), [Path(p).stem for p in paths[:n]]


@torch.no_grad()
def prediction_images(model: ModelHandle, net: nn.Module, images: Tensor, names: list[str]) -> dict[str, np.ndarray]:
    """``net``'s predictions on ``images`` (letterboxed network inputs), drawn on them."""
    task = model.task_spec
    x = images.to(device=model.device, dtype=next(net.parameters()).dtype)
    outputs = model.inference_forward(x, net=net)
    predictions = model.family.postprocess(outputs, task.postprocess_options({"conf": SCORE_THRESHOLD}))
    drawn: dict[str, np.ndarray] = {}
    for image, name, prediction in zip(images, names, predictions):
        pixels = (image.permute(1, 2, 0).clamp(0, 1) * 255 + 0.5).to(torch.uint8).numpy()
        info = task.prepare(pixels, pixels.shape[0]).info  # already square at imgsz: an identity letterbox
        res = task.make_results(pixels, name, dict(model.names), prediction, info, {})
        drawn[name] = res.plot()
    return drawn
