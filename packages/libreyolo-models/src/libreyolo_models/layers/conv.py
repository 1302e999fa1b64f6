"""Convolution + BatchNorm + activation, the unit every YOLO family is built from.

Attribute names (``conv``, ``bn``) are checkpoint keys shared with upstream LibreYOLO weights:
treat them as a file format.
"""

from __future__ import annotations

from torch import Tensor, nn

from .fuse import fold_batchnorm

# Upstream YOLO BatchNorm settings (not stored in checkpoints, so they must be rebuilt here).
BN_EPS = 1e-3
BN_MOMENTUM = 0.03


def same_padding(kernel: int, dilation: int = 1) -> int:
    """Padding that keeps the spatial size at stride 1 for an odd kernel."""
    return dilation * (kernel - 1) // 2


class Conv(nn.Module):
    """``act(bn(conv(x)))`` with a bias-free convolution; ``act=False`` leaves the activation out."""

    def __init__(self, c_in: int, c_out: int, k: int = 1, s: int = 1, p: int | None = None,
                 g: int = 1, act: bool = True) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, k, s, same_padding(k) if p is None else p, groups=g, bias=False)
        self.bn = nn.BatchNorm2d(c_out, eps=BN_EPS, momentum=BN_MOMENTUM)
        self.act = nn.SiLU(inplace=True) if act else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.bn(self.conv(x)))

    def fuse_for_inference(self) -> bool:
        """Fold ``bn`` into ``conv`` (see ``layers.fuse``); True when something changed."""
        if not isinstance(self.bn, nn.BatchNorm2d):
            return False
        self.conv = fold_batchnorm(self.conv, self.bn)
        self.bn = nn.Identity()  # type: ignore[assignment]  # folded into conv
        return True
