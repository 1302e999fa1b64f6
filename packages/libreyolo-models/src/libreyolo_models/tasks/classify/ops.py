"""Classification pixel ops on batches of tensors: one code path for CPU workers and the GPU.

A training sample is rendered by ``render_crops`` from its cached uint8 slot and its draws
(``classify_augment.CropDraws``): random resized crop, flip, RandAugment, colour jitter. The CPU
path calls it on a batch of one in a DataLoader worker; the GPU path on the whole batch on the
device. ``mix_batch`` applies a batch's mixup or CutMix and returns soft targets.
``centre_crop`` is the evaluation preprocessing, shared by validation and predict.

Values are float in [0, 255] throughout; callers divide by 255.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from .augment import RANDAUGMENT_OPS, MixDraws

CROP_FRACTION = 0.875
"""Evaluation: the short side is resized to ``imgsz / CROP_FRACTION``, then the centre
``imgsz`` square is kept (the ImageNet convention: 256 -> 224)."""

_GRAY = 128.0  # fill of pixels a RandAugment warp uncovers
_LUMA = (0.299, 0.587, 0.114)
_OP = {name: i for i, name in enumerate(RANDAUGMENT_OPS)}
_GEOMETRIC = ("rotate", "shear_x", "shear_y", "translate_x", "translate_y")


def train_cache_side(imgsz: int) -> int:
    """Long side of the training cache: enough pixels for the evaluation resize, a multiple of 8."""
    return int(math.ceil(imgsz / CROP_FRACTION / 8) * 8)


def centre_crop(image: np.ndarray, imgsz: int) -> np.ndarray:
    """Evaluation preprocessing: ``uint8 [H, W, 3]`` -> ``uint8 [imgsz, imgsz, 3]``.

    Short side to ``imgsz / CROP_FRACTION`` (bilinear, antialiased), centre square of ``imgsz``.
    Rounded to uint8 so that validation (which caches this) and predict (which calls it on the
    decoded file) feed the network identical pixels.
    """
    h, w = image.shape[:2]
    scale = imgsz / CROP_FRACTION / min(h, w)
    nh, nw = max(imgsz, round(h * scale)), max(imgsz, round(w * scale))
    chw = torch.from_numpy(np.require(image, requirements=("C", "W"))).permute(2, 0, 1).float()[None]  # PIL: read-only
    if (nh, nw) != (h, w):
        chw = F.interpolate(chw, size=(nh, nw), mode="bilinear", align_corners=False, antialias=True)
    top, left = (nh - imgsz) // 2, (nw - imgsz) // 2
    crop = chw[0, :, top:top + imgsz, left:left + imgsz]
    return crop.round().clamp(0, 255).to(torch.uint8).permute(1, 2, 0).contiguous().numpy()


def render_crops(tiles: Tensor, boxes: Tensor, flip: Tensor, jitter: Tensor, ops: Tensor, signs: Tensor, *,
                 imgsz: int, magnitude: float) -> Tensor:
    """Augmented training images.

    Args:
        tiles: ``uint8 [B, L, L, 3]`` cached slots (each image top-left in its slot).
        boxes: ``float32 [B, 4]`` crop ``(x0, y0, x1, y1)`` in slot pixels.
        flip: ``bool [B]``.
        jitter: ``float32 [B, 4]`` brightness, contrast, saturation gains and hue shift (turns).
        ops: ``int64 [B, N]`` RandAugment op ids; signs: ``float32 [B, N]``.
        imgsz: output side.
        magnitude: RandAugment magnitude in [0, 30]; 0 skips RandAugment.

    Returns:
        ``float32 [B, 3, imgsz, imgsz]`` in [0, 255] on ``tiles``' device.
    """
    x = tiles.permute(0, 3, 1, 2).float()
    rois = torch.cat((torch.arange(len(x), device=x.device, dtype=x.dtype)[:, None], boxes.to(x.dtype)), dim=1)
    # Adaptive sampling (ceil(box / output) points per output pixel, averaged) antialiases a
    # shrinking crop; aligned=True reads continuous pixel coordinates.
    from torchvision.ops import roi_align  # imported on use: torchvision costs seconds at import

    out = roi_align(x, rois, output_size=(imgsz, imgsz), spatial_scale=1.0, sampling_ratio=-1, aligned=True)
    out = torch.where(flip.view(-1, 1, 1, 1), out.flip(-1), out)
    if magnitude > 0:
        out = _randaugment(out, ops, signs, magnitude / 30.0)
    return _colour_jitter(out, jitter).clamp_(0, 255)


def _gray(x: Tensor) -> Tensor:
    r, g, b = _LUMA
    return (x[:, 0:1] * r + x[:, 1:2] * g + x[:, 2:3] * b)


def _blend(a: Tensor, b: Tensor, factor: Tensor) -> Tensor:
    """``b + (a - b) * factor`` per sample (factor ``[B]``), clamped: PIL's ImageEnhance rule."""
    return (b + (a - b) * factor.view(-1, 1, 1, 1)).clamp_(0, 255)


def _colour_jitter(x: Tensor, jitter: Tensor) -> Tensor:
    """Brightness, contrast, saturation, then hue (a rotation about the gray axis in YIQ)."""
    x = (x * jitter[:, 0].view(-1, 1, 1, 1)).clamp_(0, 255)
    mean = _gray(x).mean(dim=(1, 2, 3), keepdim=True)
    x = _blend(x, mean.expand_as(x), jitter[:, 1])
    x = _blend(x, _gray(x).expand_as(x), jitter[:, 2])
    angle = jitter[:, 3] * (2 * math.pi)
    if bool((angle != 0).any()):
        x = _rotate_hue(x, angle)
    return x


_RGB_TO_YIQ = torch.tensor([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]])


def _rotate_hue(x: Tensor, angle: Tensor) -> Tensor:
    to_yiq = _RGB_TO_YIQ.to(x.device, x.dtype)
    cos, sin = angle.cos(), angle.sin()
    rot = torch.zeros(len(x), 3, 3, device=x.device, dtype=x.dtype)
    rot[:, 0, 0] = 1
    rot[:, 1, 1], rot[:, 1, 2], rot[:, 2, 1], rot[:, 2, 2] = cos, -sin, sin, cos
    matrix = torch.linalg.inv(to_yiq) @ rot @ to_yiq  # [B, 3, 3]
    return torch.einsum("bij,bjhw->bihw", matrix, x).clamp_(0, 255)


def _randaugment(x: Tensor, ops: Tensor, signs: Tensor, level: float) -> Tensor:
    """Each sample's ops at ``level`` (magnitude / 30): the warps (rotate, shear, translate) as one
    affine per sample, then the colour ops in a fixed order; a sample's strength for an op it did
    not draw is the identity, and ``torch.where`` keeps its pixels exactly."""
    def strength(name: str) -> tuple[Tensor, Tensor]:
        chosen = ops == _OP[name]
        return chosen.any(dim=1), (signs * chosen).sum(dim=1)

    x = _warp(x, {name: strength(name) for name in _GEOMETRIC}, level)
    has, _ = strength("autocontrast")
    if bool(has.any()):
        low = x.amin(dim=(2, 3), keepdim=True)
        high = x.amax(dim=(2, 3), keepdim=True)
        stretched = (x - low) * (255.0 / (high - low).clamp(min=1.0))
        x = torch.where(has.view(-1, 1, 1, 1) & (high > low), stretched, x)
    for name, reference in (("brightness", lambda t: torch.zeros_like(t)), ("color", lambda t: _gray(t).expand_as(t)),
                            ("contrast", lambda t: _gray(t).mean(dim=(1, 2, 3), keepdim=True).expand_as(t)),
                            ("sharpness", _smooth)):
        has, sign = strength(name)
        if bool(has.any()):
            x = torch.where(has.view(-1, 1, 1, 1), _blend(x, reference(x), 1 + 0.9 * level * sign), x)
    has, _ = strength("posterize")
    if bool(has.any()):
        step = float(2 ** int(4 * level))
        x = torch.where(has.view(-1, 1, 1, 1), torch.floor(x / step) * step, x)
    has, _ = strength("solarize")
    if bool(has.any()):
        threshold = 255.0 * (1 - level)
        x = torch.where(has.view(-1, 1, 1, 1) & (x >= threshold), 255.0 - x, x)
    return x


def _smooth(x: Tensor) -> Tensor:
    """PIL's SMOOTH kernel (centre 5, others 1, over 13), the reference of ImageEnhance.Sharpness."""
    kernel = torch.ones(3, 1, 3, 3, device=x.device, dtype=x.dtype)
    kernel[:, :, 1, 1] = 5.0
    return F.conv2d(F.pad(x, (1, 1, 1, 1), mode="replicate"), kernel / 13.0, groups=3)


def _warp(x: Tensor, strengths: dict[str, tuple[Tensor, Tensor]], level: float) -> Tensor:
    chosen = torch.stack([has for has, _ in strengths.values()]).any(dim=0)
    if not bool(chosen.any()):
        return x
    size = x.shape[-1]
    angle = strengths["rotate"][1] * math.radians(30.0 * level)
    theta = torch.zeros(len(x), 2, 3, device=x.device, dtype=x.dtype)
    theta[:, 0, 0], theta[:, 0, 1], theta[:, 1, 0], theta[:, 1, 1] = angle.cos(), -angle.sin(), angle.sin(), angle.cos()
    theta[:, 0, 1] += strengths["shear_x"][1] * 0.3 * level
    theta[:, 1, 0] += strengths["shear_y"][1] * 0.3 * level
    theta[:, 0, 2] = strengths["translate_x"][1] * 0.45 * level * 2  # normalized coordinates span 2
    theta[:, 1, 2] = strengths["translate_y"][1] * 0.45 * level * 2
    picked = chosen.nonzero().flatten()
    grid = F.affine_grid(theta[picked], [len(picked), 3, size, size], align_corners=False)
    warped = F.grid_sample(x[picked] - _GRAY, grid, mode="bilinear", padding_mode="zeros", align_corners=False) + _GRAY
    return x.index_copy(0, picked, warped)


def mix_batch(images: Tensor, labels: Tensor, nc: int, mix: MixDraws | None) -> tuple[Tensor, Tensor]:
    """Mixup or CutMix of each image with its partner in the reversed batch.

    Args:
        images: ``float [B, 3, S, S]``.
        labels: ``int64 [B]`` on ``images``' device.
        nc: class count.
        mix: the batch's draws, or None for no mixing.

    Returns:
        The images and ``float32 [B, nc]`` soft targets (one-hot without mixing).
    """
    onehot = F.one_hot(labels, nc).to(torch.float32)
    if mix is None:
        return images, onehot
    partner = images.flip(0)
    if mix.box is None:
        images = images * mix.lam + partner * (1.0 - mix.lam)
    else:
        x0, y0, x1, y1 = mix.box
        images = images.clone()
        images[:, :, y0:y1, x0:x1] = partner[:, :, y0:y1, x0:x1]
    return images, onehot * mix.lam + onehot.flip(0) * (1.0 - mix.lam)
