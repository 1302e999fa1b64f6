"""Classification augmentation settings and every random choice of one sample, drawn up front.

As for detection (``augment_draws``), nothing is drawn while pixels are made: each sample's
random-resized-crop box, flip, colour jitter and RandAugment ops come from a generator seeded by
``(seed, rank, epoch, sample index)``, so the CPU path (one sample in a worker) and the GPU path
(a batch on the device) render the same picture, and every sample draws every value in the same
order whatever the settings. Mixup and CutMix pair images of one batch, so they are drawn per
batch (``draw_mix``).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, fields

import numpy as np

from ...data.augment_draws import sample_rng
from ...errors import ConfigError

RANDAUGMENT_OPS = ("identity", "autocontrast", "brightness", "color", "contrast", "sharpness", "posterize",
                   "solarize", "rotate", "shear_x", "shear_y", "translate_x", "translate_y")
"""RandAugment's ops (its paper's list without ``equalize``, whose histogram does not batch)."""

RANDAUGMENT_N_OPS = 2
"""Ops per image, as RandAugment's ImageNet recipe uses."""

_CROP_TRIES = 10
_RATIO = (3 / 4, 4 / 3)

_RANGES: dict[str, tuple[float, float, str]] = {
    "crop_min_area": (0.01, 1.0, "smallest random crop, as a share of the image area"),
    "fliplr": (0.0, 1.0, "probability of a horizontal flip"),
    "hsv_h": (0.0, 0.5, "hue jitter as a fraction of the colour circle"),
    "hsv_s": (0.0, 1.0, "saturation jitter range (1 +/- hsv_s)"),
    "hsv_v": (0.0, 1.0, "brightness and contrast jitter range (1 +/- hsv_v)"),
    "randaugment": (0.0, 30.0, "RandAugment magnitude (0 off, 9 is the usual ImageNet value)"),
    "mixup": (0.0, 10.0, "mixup Beta(alpha, alpha) parameter (0 off, 0.8 typical)"),
    "cutmix": (0.0, 10.0, "CutMix Beta(alpha, alpha) parameter (0 off, 1.0 typical)"),
}


@dataclass(frozen=True)
class ClassifyAugment:
    """What ``train`` options mean for classification (names shared with detection where the
    meaning carries over: ``fliplr``, ``hsv_h``/``hsv_s``/``hsv_v``).

    Raises:
        ConfigError: a value outside its range (the message names it and the range).
    """

    crop_min_area: float = 0.08
    fliplr: float = 0.5
    hsv_h: float = 0.015
    hsv_s: float = 0.4
    hsv_v: float = 0.4
    randaugment: float = 0.0
    mixup: float = 0.0
    cutmix: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            low, high, meaning = _RANGES[f.name]
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
                raise ConfigError(f"augmentation option {f.name}={value!r} must be a number ({meaning})")
            if not low <= float(value) <= high:
                raise ConfigError(f"augmentation option {f.name}={value} is outside [{low}, {high}] ({meaning}); "
                                  "use a value in that range")

    @classmethod
    def off(cls) -> ClassifyAugment:
        """The whole image, resized, unchanged otherwise."""
        return cls(crop_min_area=1.0, fliplr=0.0, hsv_h=0.0, hsv_s=0.0, hsv_v=0.0)

    @property
    def mixes(self) -> bool:
        return self.mixup > 0 or self.cutmix > 0


@dataclass(frozen=True)
class CropDraws:
    """Every random choice for one training sample.

    Attributes:
        index: the image's index in the split.
        box: ``(x0, y0, x1, y1)`` crop in the cached image's pixels (continuous coordinates).
        flip: mirror left-right.
        jitter: ``(brightness, contrast, saturation, hue)``: three gains around 1, a hue shift in turns.
        ops: RandAugment op ids (``RANDAUGMENT_OPS``), ``RANDAUGMENT_N_OPS`` of them.
        signs: +1 or -1 per op (the direction of rotations, shears, shifts and gains).
    """

    index: int
    box: tuple[float, float, float, float]
    flip: bool
    jitter: tuple[float, float, float, float]
    ops: tuple[int, ...]
    signs: tuple[float, ...]


def draw_crop(augment: ClassifyAugment, *, index: int, hw: tuple[int, int], seed: int, rank: int,
              epoch: int) -> CropDraws:
    """The draws of sample ``index`` (cached size ``hw``) in ``epoch`` on ``rank``."""
    rng = sample_rng(seed, rank, epoch, index)
    box = _crop_box(rng, hw, augment.crop_min_area)
    flip = bool(rng.random() < augment.fliplr)
    u = rng.uniform(-1.0, 1.0, 4)
    jitter = (float(1 + augment.hsv_v * u[0]), float(1 + augment.hsv_v * u[1]), float(1 + augment.hsv_s * u[2]),
              float(augment.hsv_h * u[3]))
    ops = rng.integers(0, len(RANDAUGMENT_OPS), RANDAUGMENT_N_OPS)
    signs = np.where(rng.random(RANDAUGMENT_N_OPS) < 0.5, -1.0, 1.0)
    if augment.randaugment == 0:
        ops = np.zeros_like(ops)
    return CropDraws(index, box, flip, jitter, tuple(int(v) for v in ops),
                     tuple(float(v) for v in signs))


def _crop_box(rng: np.random.Generator, hw: tuple[int, int], min_area: float) -> tuple[float, float, float, float]:
    """Random-resized-crop: area share in ``[min_area, 1]``, aspect ratio log-uniform in
    ``[3/4, 4/3]``; ``_CROP_TRIES`` tries (all drawn, used or not), then the central crop of the
    largest allowed aspect ratio."""
    h, w = hw
    area = h * w
    shares = rng.uniform(min_area, 1.0, _CROP_TRIES)
    ratios = np.exp(rng.uniform(math.log(_RATIO[0]), math.log(_RATIO[1]), _CROP_TRIES))
    corners = rng.random((_CROP_TRIES, 2))
    for share, ratio, (fx, fy) in zip(shares, ratios, corners):
        cw = round(math.sqrt(area * share * ratio))
        ch = round(math.sqrt(area * share / ratio))
        if 0 < cw <= w and 0 < ch <= h:
            x0, y0 = math.floor(fx * (w - cw + 1)), math.floor(fy * (h - ch + 1))
            return float(x0), float(y0), float(x0 + cw), float(y0 + ch)
    ratio = w / h
    if ratio < _RATIO[0]:
        cw, ch = w, round(w / _RATIO[0])
    elif ratio > _RATIO[1]:
        cw, ch = round(h * _RATIO[1]), h
    else:
        cw, ch = w, h
    x0, y0 = (w - cw) // 2, (h - ch) // 2
    return float(x0), float(y0), float(x0 + cw), float(y0 + ch)


@dataclass(frozen=True)
class MixDraws:
    """One batch's mixing: ``lam`` of each image kept, the rest from its partner (the batch
    reversed). ``box`` is CutMix's pasted region ``(x0, y0, x1, y1)`` in output pixels, or None
    for mixup."""

    lam: float
    box: tuple[int, int, int, int] | None


def draw_mix(augment: ClassifyAugment, rng: np.random.Generator, imgsz: int) -> MixDraws:
    """Mixup or CutMix (half the batches each when both are on) for one batch."""
    use_cutmix = augment.cutmix > 0 and (augment.mixup == 0 or rng.random() < 0.5)
    alpha = augment.cutmix if use_cutmix else augment.mixup
    lam = float(rng.beta(alpha, alpha))
    if not use_cutmix:
        return MixDraws(lam, None)
    cut = math.sqrt(1.0 - lam)
    cw, ch = int(imgsz * cut), int(imgsz * cut)
    cx, cy = (int(v) for v in rng.integers(0, imgsz, 2))
    x0, x1 = max(cx - cw // 2, 0), min(cx + cw // 2, imgsz)
    y0, y1 = max(cy - ch // 2, 0), min(cy + ch // 2, imgsz)
    return MixDraws(1.0 - (x1 - x0) * (y1 - y0) / (imgsz * imgsz), (x0, y0, x1, y1))
