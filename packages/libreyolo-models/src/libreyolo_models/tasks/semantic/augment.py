"""Training augmentation of an image and its mask together: random scale, crop, flip, colour.

One geometric transform per sample maps every output pixel to a point of the source image; the
image is sampled there bilinearly and the mask by nearest neighbour, so the two stay aligned pixel
for pixel and the mask never gains a class id that was not in it. Output pixels that fall outside
the source get the letterbox grey (114) in the image and the ignore value in the mask: padding is
never trained as a class.

The transform, from the cached image (long side ``S``, as the letterbox sizes it for predict):
scale by ``r`` in ``[1 - scale, 1 + scale]``, then cut an ``S x S`` window at a uniformly drawn
position (the window hangs over the edges where the scaled image is smaller), then mirror
left-right with probability ``fliplr``; then jitter hue, saturation and value (``jitter_hsv``).

As for detection, every random number is drawn first (``draw_mask_params``, seeded by seed, rank,
epoch and sample index) and ``render_pairs`` draws none: the CPU path renders one sample in a
DataLoader worker, the GPU path a whole batch on the device, with the same function.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ...data.augment_draws import AugmentConfig, sample_rng
from ...data.augment_ops import jitter_hsv
from ...data.letterbox import FILL
from .mask_files import IGNORE_INDEX

PARAMS = 7
"""Per-sample draws, in order: scale r, window x and y position in [0, 1], flip (0/1), hue shift,
saturation gain, value gain."""

SEMANTIC_AUGMENTATIONS = frozenset({"scale", "fliplr", "hsv_h", "hsv_s", "hsv_v"})
"""The ``AugmentConfig`` fields this augmentation reads (mosaic, rotation, shear do not apply)."""


def draw_mask_params(config: AugmentConfig, *, index: int, seed: int, rank: int, epoch: int) -> np.ndarray:
    """Every random choice of sample ``index`` in ``epoch`` on ``rank``: ``float64 [PARAMS]``."""
    rng = sample_rng(seed, rank, epoch, index)
    u = rng.random(4)  # fixed order: scale, window x, window y, flip
    hsv = rng.uniform(-1.0, 1.0, size=3)
    return np.array([1.0 + config.scale * (2 * u[0] - 1), u[1], u[2], float(u[3] < config.fliplr),
                     config.hsv_h * hsv[0], 1.0 + config.hsv_s * hsv[1], 1.0 + config.hsv_v * hsv[2]])


def render_pairs(slots: Tensor, masks: Tensor, hw: Tensor, params: Tensor, out_size: int) -> tuple[Tensor, Tensor]:
    """Transform images and masks together (see the module docstring).

    Args:
        slots: ``uint8 [B, T, T, 3]`` images, each in the top-left ``hw[b]`` of its slot.
        masks: ``uint8 [B, T, T]`` their masks, laid out alike (the rest of a slot is never read).
        hw: ``int64 [B, 2]`` each image's ``(h, w)``.
        params: ``float64 [B, PARAMS]`` from ``draw_mask_params``, on the CPU (read on the host to
            skip the colour pass when no sample jitters; copied to the device once).
        out_size: output side ``S``.

    Returns:
        ``float32 [B, 3, S, S]`` RGB in [0, 255] and ``uint8 [B, S, S]`` masks, on ``slots.device``.
    """
    device, t = slots.device, slots.shape[1]
    p = params.to(device=device, dtype=torch.float32)
    size = hw.to(device=device, dtype=torch.float32)
    r, flip = p[:, 0:1], p[:, 3:4] > 0.5
    axis = torch.arange(out_size, device=device, dtype=torch.float32)[None] + 0.5  # output pixel centres
    coords = []
    for dim, (extent, u) in enumerate(((size[:, 1:2], p[:, 1:2]), (size[:, 0:1], p[:, 2:3]))):
        o = torch.where(flip, out_size - axis, axis) if dim == 0 else axis
        offset = u * (extent * r - out_size)              # window position in the scaled image
        coords.append((o + offset) / r)                   # [B, S] source coordinate, in pixels
    x, y = coords
    inside = ((x >= 0) & (x < size[:, 1:2]))[:, None, :] & ((y >= 0) & (y < size[:, 0:1]))[:, :, None]
    # Clamp to the image's pixel centres: bilinear then never blends in the slot's unused area.
    gx = _normalized(torch.minimum(x.clamp(min=0.5), size[:, 1:2] - 0.5), t)
    gy = _normalized(torch.minimum(y.clamp(min=0.5), size[:, 0:1] - 0.5), t)
    grid = torch.stack(torch.broadcast_tensors(gx[:, None, :], gy[:, :, None]), dim=-1)  # [B, S, S, 2]
    images = F.grid_sample(slots.permute(0, 3, 1, 2).float(), grid, mode="bilinear", align_corners=False)
    labels = F.grid_sample(masks[:, None].float(), grid, mode="nearest", align_corners=False)[:, 0]
    images = torch.where(inside[:, None], images, torch.tensor(float(FILL), device=device))
    labels = torch.where(inside, labels, torch.tensor(float(IGNORE_INDEX), device=device))
    if bool((params[:, 4:7] != torch.tensor([0.0, 1.0, 1.0], dtype=params.dtype)).any()):
        images = jitter_hsv(images, p[:, 4:7])
    return images, labels.round_().to(torch.uint8)


def _normalized(pixels: Tensor, extent: int) -> Tensor:
    """Pixel coordinates -> grid_sample's [-1, 1] (align_corners=False: -1 is the left edge)."""
    return pixels * (2.0 / extent) - 1.0
