"""BiRefNet's pixel loss: every output map (the three side maps and the matte), resized to the
target, passed through a sigmoid and scored by BCE, IoU, SSIM and MAE, each times its gain.

Facts from the official ``loss.py`` (``PixLoss``) and ``config.py`` (``lambdas_pix_last`` of the
'General' task, what the general-purpose checkpoints were trained with): gains bce 30, iou 0.5,
ssim 10 (``1 - (1 + SSIM) / 2``, 11x11 Gaussian window, sigma 1.5, zero padding, C1 = 0.01^2,
C2 = 0.03^2), mae 100; side maps resized bilinearly with corners aligned. One difference: the
official IoU loss is summed over the images of a batch, here it is their mean, so a gain means
the same at any batch size and two ranks at b/2 compute what one rank at b does. The gradient
(``gdt``) supervision of the official training is not implemented (its ``gdt_convs_pred_*``
weights are carried, untrained).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

LOSS_NAMES = ("bce", "iou", "ssim", "mae")
SSIM_WINDOW = 11


def _gaussian_window(device: torch.device, dtype: torch.dtype) -> Tensor:
    x = torch.arange(SSIM_WINDOW, device=device, dtype=torch.float32) - SSIM_WINDOW // 2
    g = torch.exp(-(x * x) / (2 * 1.5 ** 2))
    g = g / g.sum()
    return (g[:, None] * g[None, :]).to(dtype).view(1, 1, SSIM_WINDOW, SSIM_WINDOW)


def ssim_loss(pred: Tensor, target: Tensor) -> Tensor:
    """``1 - (1 + SSIM) / 2`` of two ``[B, 1, H, W]`` maps in [0, 1] (mean over the SSIM map)."""
    window = _gaussian_window(pred.device, pred.dtype)
    pad = SSIM_WINDOW // 2

    def blur(t: Tensor) -> Tensor:
        return F.conv2d(t, window, padding=pad)

    mu1, mu2 = blur(pred), blur(target)
    s11, s22, s12 = blur(pred * pred) - mu1 * mu1, blur(target * target) - mu2 * mu2, blur(pred * target) - mu1 * mu2
    c1, c2 = 0.01 ** 2, 0.03 ** 2
    ssim = ((2 * mu1 * mu2 + c1) * (2 * s12 + c2)) / ((mu1 * mu1 + mu2 * mu2 + c1) * (s11 + s22 + c2))
    return 1 - (1 + ssim.mean()) / 2


def iou_loss(pred: Tensor, target: Tensor) -> Tensor:
    """Mean over images of ``1 - soft IoU`` (``sum(p t) / (sum(p) + sum(t) - sum(p t))``)."""
    inter = (pred * target).flatten(1).sum(1)
    union = pred.flatten(1).sum(1) + target.flatten(1).sum(1) - inter
    return (1 - inter / union).mean()


def pixel_losses(outputs: tuple[Tensor, ...], target: Tensor) -> dict[str, Tensor]:
    """Each term summed over the output maps (ungained). ``target``: ``float [B, 1, H, W]`` alpha."""
    terms = {name: target.new_zeros(()) for name in LOSS_NAMES}
    for logits in outputs:
        if logits.shape[-2:] != target.shape[-2:]:
            logits = F.interpolate(logits, size=target.shape[-2:], mode="bilinear", align_corners=True)
        pred = logits.float().sigmoid()
        terms["bce"] = terms["bce"] + F.binary_cross_entropy(pred, target)
        terms["iou"] = terms["iou"] + iou_loss(pred, target)
        terms["ssim"] = terms["ssim"] + ssim_loss(pred, target)
        terms["mae"] = terms["mae"] + (pred - target).abs().mean()
    return terms
