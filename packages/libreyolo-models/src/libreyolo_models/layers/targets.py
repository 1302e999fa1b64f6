"""Synthetic detection targets: plausible boxes for tools that need a training step without data."""

from __future__ import annotations

import torch
from torch import Tensor


def random_box_targets(batch: int, nc: int, generator: torch.Generator, *, per_image: int = 4) -> Tensor:
    """``float32 [batch * per_image, 6]`` rows (image index, class, cx, cy, w, h), boxes normalised,
    3 to 35 % of the image wide and tall, always inside it."""
    n = batch * per_image
    wh = torch.rand(n, 2, generator=generator) * 0.3 + 0.05
    xy = torch.rand(n, 2, generator=generator) * (1 - wh) + wh / 2
    owner = torch.arange(batch).repeat_interleave(per_image)[:, None].float()
    classes = torch.randint(0, nc, (n, 1), generator=generator).float()
    return torch.cat([owner, classes, xy, wh], 1)
