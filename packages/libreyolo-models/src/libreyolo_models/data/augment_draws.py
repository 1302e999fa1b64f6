"""All randomness of one training sample, drawn up front from a seed the sample owns.

The CPU path augments a sample inside a DataLoader worker; the GPU path augments a whole batch on
the device. For both to produce the same picture, neither may draw random numbers while it
augments: every choice (mosaic or not, the three mosaic partners and the mosaic centre, the affine
warp, the HSV gains, the flip) is drawn here first, from a numpy Generator seeded by
``(seed, rank, epoch, sample index)``. The result is deterministic under a seed, independent of
which worker or which batch a sample lands in, and distinct per rank and per epoch.

Every sample draws every value in the same order, whether it is used or not, so switching mosaic
off (the last ``close_mosaic`` epochs) leaves that sample's flip and colour draws unchanged.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, fields

import numpy as np

from ..errors import ConfigError

_RANGES: dict[str, tuple[float, float, str]] = {
    # field: (lowest, highest, what it means) -- used for the error message
    "mosaic": (0.0, 1.0, "probability of a 4-image mosaic"),
    "degrees": (0.0, 180.0, "rotation range in degrees"),
    "translate": (0.0, 0.5, "translation as a fraction of the image size"),
    "scale": (0.0, 0.95, "scale gain range (1 +/- scale)"),
    "shear": (0.0, 45.0, "shear range in degrees"),
    "hsv_h": (0.0, 0.5, "hue shift as a fraction of the colour circle"),
    "hsv_s": (0.0, 1.0, "saturation gain range (1 +/- hsv_s)"),
    "hsv_v": (0.0, 1.0, "value gain range (1 +/- hsv_v)"),
    "fliplr": (0.0, 1.0, "probability of a horizontal flip"),
}


@dataclass(frozen=True)
class AugmentConfig:
    """Training augmentation settings; names and defaults are the ones Ultralytics users know.

    ``hsv_h`` is an additive hue shift (a fraction of the colour circle); ``hsv_s`` and ``hsv_v``
    are multiplicative gain ranges. Every value is checked on construction.

    Raises:
        ConfigError: a value outside its range (the message names the field, the value and the
            allowed range).
    """

    mosaic: float = 1.0
    degrees: float = 0.0
    translate: float = 0.1
    scale: float = 0.5
    shear: float = 0.0
    hsv_h: float = 0.015
    hsv_s: float = 0.7
    hsv_v: float = 0.4
    fliplr: float = 0.5

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            low, high, meaning = _RANGES[f.name]
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
                raise ConfigError(f"augmentation option {f.name}={value!r} must be a number ({meaning})")
            if not low <= float(value) <= high:
                raise ConfigError(f"augmentation option {f.name}={value} is outside [{low}, {high}] "
                                  f"({meaning}); use a value in that range")

    def unused(self, honoured: frozenset[str]) -> list[str]:
        """``name=value`` of each setting that is on (not 0) but not in ``honoured``: what a task
        that applies only some augmentations warns about."""
        return [f"{f.name}={getattr(self, f.name):g}" for f in fields(self)
                if f.name not in honoured and getattr(self, f.name) != 0]

    @classmethod
    def off(cls) -> AugmentConfig:
        """No augmentation at all: every sample is its letterboxed image, unchanged."""
        return cls(mosaic=0.0, degrees=0.0, translate=0.0, scale=0.0, shear=0.0,
                   hsv_h=0.0, hsv_s=0.0, hsv_v=0.0, fliplr=0.0)


@dataclass(frozen=True)
class SampleDraws:
    """Every random choice for one training sample.

    Attributes:
        index: the sample's image index in the split.
        is_mosaic: whether the sample is a 4-image mosaic (else its letterboxed image alone).
        partners: the three other images of the mosaic (drawn from the whole split; unused
            without mosaic).
        centre: ``(x, y)`` pixel where the four mosaic tiles meet on the ``2S x 2S`` canvas.
        canvas: side of the canvas the warp reads: ``2S`` with mosaic, ``S`` (the letterbox)
            without.
        matrix: ``float64 [2, 3]`` affine map from canvas pixels to output pixels (continuous
            coordinates: pixel ``i`` spans ``[i, i + 1)``); rotation, scale, shear and translation
            composed into one matrix.
        scale: the scale factor inside ``matrix`` (the box filter compares areas with it).
        hsv: ``(hue shift in turns, saturation gain, value gain)``.
        flip: whether the output is mirrored left-right.
    """

    index: int
    is_mosaic: bool
    partners: tuple[int, int, int]
    centre: tuple[int, int]
    canvas: int
    matrix: np.ndarray
    scale: float
    hsv: tuple[float, float, float]
    flip: bool

    @property
    def tile_indices(self) -> tuple[int, ...]:
        """Image indices of the tiles this sample reads, main image first."""
        return (self.index, *self.partners) if self.is_mosaic else (self.index,)


def sample_rng(seed: int, rank: int, epoch: int, index: int) -> np.random.Generator:
    """The Generator one sample draws from: a pure function of its four coordinates."""
    for name, value in (("seed", seed), ("rank", rank), ("epoch", epoch), ("index", index)):
        if value < 0:
            raise ValueError(f"{name}={value} must be >= 0 to seed a sample's random draws")
    return np.random.default_rng(np.random.SeedSequence([seed, rank, epoch, index]))


def affine_matrix(*, canvas: int, out_size: int, degrees: float, scale: float, shear_x: float,
                  shear_y: float, translate_x: float, translate_y: float) -> np.ndarray:
    """One ``float64 [2, 3]`` map from canvas pixels to output pixels.

    The canvas centre goes to the origin, then rotation with scale, then shear, then the origin
    goes to ``(translate_x, translate_y) * out_size``. With no rotation, shear or scaling and a
    translation of 0.5, the central ``out_size`` square of the canvas is the output.

    Args:
        canvas: side of the square canvas being warped, in pixels.
        out_size: side of the square output, in pixels.
        degrees: rotation, counter-clockwise on screen, in degrees.
        scale: isotropic scale factor (> 0).
        shear_x: shear along x, in degrees.
        shear_y: shear along y, in degrees.
        translate_x: where the canvas centre lands, as a fraction of ``out_size``.
        translate_y: same for y.
    """
    centre = np.array([[1.0, 0.0, -canvas / 2], [0.0, 1.0, -canvas / 2], [0.0, 0.0, 1.0]])
    a = math.radians(degrees)
    rotate = np.array([[scale * math.cos(a), scale * math.sin(a), 0.0],
                       [-scale * math.sin(a), scale * math.cos(a), 0.0], [0.0, 0.0, 1.0]])
    shear = np.array([[1.0, math.tan(math.radians(shear_x)), 0.0],
                      [math.tan(math.radians(shear_y)), 1.0, 0.0], [0.0, 0.0, 1.0]])
    move = np.array([[1.0, 0.0, translate_x * out_size], [0.0, 1.0, translate_y * out_size],
                     [0.0, 0.0, 1.0]])
    return (move @ shear @ rotate @ centre)[:2].copy()


def draw_sample(config: AugmentConfig, *, index: int, n_images: int, imgsz: int, seed: int,
                rank: int, epoch: int, mosaic: bool) -> SampleDraws:
    """Draw every random choice for sample ``index`` of epoch ``epoch`` on ``rank``.

    Args:
        config: the augmentation settings.
        index: the sample's image index in the split.
        n_images: images in the split (mosaic partners come from all of them).
        imgsz: output side ``S`` in pixels.
        seed: the configured seed (>= 0).
        rank: this process's rank.
        epoch: the epoch being drawn for.
        mosaic: whether mosaic is open this epoch (closed for the last ``close_mosaic`` epochs).
    """
    rng = sample_rng(seed, rank, epoch, index)
    u = rng.random(8)  # fixed order: mosaic, rotation, scale, shear x/y, translate x/y, flip
    partners = rng.integers(0, n_images, size=3)
    centre = rng.integers(imgsz // 2, imgsz + imgsz // 2 + 1, size=2)
    hsv_u = rng.uniform(-1.0, 1.0, size=3)

    is_mosaic = bool(mosaic and u[0] < config.mosaic)
    canvas = 2 * imgsz if is_mosaic else imgsz
    scale = 1.0 + config.scale * (2 * u[2] - 1)
    t = config.translate
    matrix = affine_matrix(
        canvas=canvas, out_size=imgsz, degrees=config.degrees * (2 * u[1] - 1), scale=scale,
        shear_x=config.shear * (2 * u[3] - 1), shear_y=config.shear * (2 * u[4] - 1),
        translate_x=0.5 + t * (2 * u[5] - 1), translate_y=0.5 + t * (2 * u[6] - 1))
    hsv = (float(config.hsv_h * hsv_u[0]), float(1.0 + config.hsv_s * hsv_u[1]),
           float(1.0 + config.hsv_v * hsv_u[2]))
    return SampleDraws(
        index=index, is_mosaic=is_mosaic, partners=tuple(int(p) for p in partners),  # type: ignore[arg-type]
        centre=(int(centre[0]), int(centre[1])), canvas=canvas, matrix=matrix, scale=float(scale),
        hsv=hsv, flip=bool(u[7] < config.fliplr))
