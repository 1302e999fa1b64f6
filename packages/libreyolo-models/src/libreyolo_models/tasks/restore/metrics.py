"""Restoration metrics: PSNR and SSIM of 8-bit images, as the restoration literature reports them.

Both are computed as NAFNet's official evaluation (BasicSR's ``calculate_psnr`` /
``calculate_ssim`` with ``crop_border=0``, RGB) does, and as scikit-image computes them
(``peak_signal_noise_ratio``; ``structural_similarity`` with Gaussian weights, sigma 1.5,
population covariances, data range 255), which the tests hold them to:

- the restored image is clamped to [0, 1] and rounded to 8 bits first (what a saved picture holds);
- PSNR = ``10 * log10(255**2 / MSE)`` over all pixels and channels, in float64 (inf for a perfect
  image);
- SSIM (Wang et al., 2004) per channel: local means, variances and the covariance under an 11x11
  Gaussian window (sigma 1.5) over the window positions that fit inside the image (a "valid"
  filter), ``C1 = (0.01 * 255)**2``, ``C2 = (0.03 * 255)**2``; the map's mean, averaged over the
  channels.

The split's figure is the mean over images of each image's value (not the PSNR of the pooled
error), as published benchmarks average. Distributed validation adds per-image sums over ranks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ...errors import ConfigError

SSIM_WINDOW = 11
SSIM_SIGMA = 1.5
DATA_RANGE = 255.0


def to_pixels(image: Tensor) -> Tensor:
    """Float ``[..., 3, H, W]`` in [0, 1] -> the 8-bit values a saved picture holds, as float64."""
    return image.detach().to(torch.float64).clamp(0.0, 1.0).mul(255.0).round()


def psnr(restored: Tensor, target: Tensor, data_range: float = DATA_RANGE) -> float:
    """PSNR in dB of two images of one shape (any layout), values in ``[0, data_range]``."""
    if restored.shape != target.shape:
        raise ConfigError(f"PSNR of images of shapes {tuple(restored.shape)} and {tuple(target.shape)}: they must match")
    mse = float((restored.to(torch.float64) - target.to(torch.float64)).pow(2).mean())
    return math.inf if mse == 0 else 10.0 * math.log10(data_range * data_range / mse)


def gaussian_window(size: int = SSIM_WINDOW, sigma: float = SSIM_SIGMA, *,
                    device: torch.device | None = None) -> Tensor:
    """The normalised 1-D Gaussian of ``size`` taps (float64)."""
    x = torch.arange(size, dtype=torch.float64, device=device) - (size - 1) / 2
    g = torch.exp(-(x * x) / (2 * sigma * sigma))
    return g / g.sum()


def ssim(restored: Tensor, target: Tensor, data_range: float = DATA_RANGE) -> float:
    """Mean SSIM of two ``[C, H, W]`` images (values in ``[0, data_range]``), averaged over channels.

    Raises:
        ConfigError: the shapes differ, or a side is shorter than the 11-pixel window.
    """
    if restored.shape != target.shape or restored.dim() != 3:
        raise ConfigError(f"SSIM needs two [C, H, W] images of one shape, got {tuple(restored.shape)} and "
                          f"{tuple(target.shape)}")
    if min(restored.shape[-2:]) < SSIM_WINDOW:
        raise ConfigError(f"SSIM of a {restored.shape[-1]}x{restored.shape[-2]} image: both sides must be at least "
                          f"{SSIM_WINDOW} pixels (the Gaussian window)")
    x = restored.to(torch.float64)[:, None]
    y = target.to(torch.float64)[:, None]
    g = gaussian_window(device=x.device)
    rows, cols = g.view(1, 1, -1, 1), g.view(1, 1, 1, -1)

    def blur(t: Tensor) -> Tensor:
        return F.conv2d(F.conv2d(t, rows), cols)  # "valid": only window positions inside the image

    mx, my = blur(x), blur(y)
    vx, vy, cxy = blur(x * x) - mx * mx, blur(y * y) - my * my, blur(x * y) - mx * my
    c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
    ssim_map = ((2 * mx * my + c1) * (2 * cxy + c2)) / ((mx * mx + my * my + c1) * (vx + vy + c2))
    return float(ssim_map.mean(dim=(1, 2, 3)).mean())


@dataclass(frozen=True)
class RestoreResult:
    """One validation's outcome: mean PSNR (dB) and SSIM of the restored images, and of the
    inputs as they came (what restoration improved on)."""

    psnr: float
    ssim: float
    psnr_input: float
    ssim_input: float
    n_images: int

    @property
    def fitness(self) -> float:
        return self.psnr

    @property
    def psnr_gain(self) -> float:
        """dB gained over the degraded inputs."""
        return self.psnr - self.psnr_input

    def as_dict(self) -> dict[str, float]:
        return {"metrics/PSNR": self.psnr, "metrics/SSIM": self.ssim, "metrics/PSNR_input": self.psnr_input,
                "metrics/SSIM_input": self.ssim_input}

    def best_fields(self) -> dict[str, float]:
        return {"PSNR": self.psnr, "SSIM": self.ssim}

    def summary(self) -> str:
        return (f"PSNR {self.psnr:.2f} dB ({self.psnr_gain:+.2f} over the inputs)  SSIM {self.ssim:.4f} "
                f"(inputs {self.ssim_input:.4f})")

    def table(self) -> str:
        lines = [f"{'':>10}{'Images':>8}{'PSNR dB':>10}{'SSIM':>9}",
                 f"{'restored':>10}{self.n_images:>8}{self.psnr:>10.2f}{self.ssim:>9.4f}",
                 f"{'input':>10}{self.n_images:>8}{self.psnr_input:>10.2f}{self.ssim_input:>9.4f}"]
        return "\n".join(lines)


class RestoreMetrics:
    """Sums of per-image PSNR and SSIM (restored and input) over the images seen."""

    def __init__(self) -> None:
        self.sums = torch.zeros(4, dtype=torch.float64)  # psnr, ssim, psnr_input, ssim_input
        self.n_images = 0

    def update(self, restored: Tensor, target: Tensor, degraded: Tensor) -> None:
        """Count one image: ``restored``, ``target`` and ``degraded`` are ``[3, H, W]`` in [0, 1]."""
        out, clean, given = to_pixels(restored), to_pixels(target), to_pixels(degraded)
        values = (psnr(out, clean), ssim(out, clean), psnr(given, clean), ssim(given, clean))
        self.sums += torch.tensor([min(v, 100.0) for v in values], dtype=torch.float64)  # a perfect image: 100 dB
        self.n_images += 1

    def result(self, sums: Tensor | None = None, n_images: int | None = None) -> RestoreResult:
        """The means (over ``sums``/``n_images`` when given: the totals over ranks)."""
        sums = self.sums if sums is None else sums
        n = self.n_images if n_images is None else n_images
        psnr_out, ssim_out, psnr_in, ssim_in = (sums / max(n, 1)).tolist()
        return RestoreResult(psnr_out, ssim_out, psnr_in, ssim_in, n)
