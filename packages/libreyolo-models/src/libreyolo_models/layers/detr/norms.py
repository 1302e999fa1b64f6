"""The convolution + norm unit the DETR backbones and hybrid encoders are built from, and
the frozen BatchNorm the larger backbones use.

Attribute names (``conv``, ``norm``; ``weight``, ``bias``, ``running_mean``, ``running_var``)
are upstream checkpoint keys: treat them as a file format.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..fuse import fold_batchnorm

NORM_EPS = 1e-5  # RT-DETR's BatchNorm and FrozenBatchNorm epsilon (not stored in checkpoints)


class FrozenBatchNorm2d(nn.Module):
    """BatchNorm whose statistics and affine are fixed: ``x * scale + shift`` from buffers.

    Everything is a buffer (so nothing trains and the optimizer never sees it) and there is no
    ``num_batches_tracked``: the layout upstream's r50/r50m/r101/l/x checkpoints have. Train and
    eval mode compute the same thing, so a pretrained backbone keeps its statistics at any batch.
    """

    weight: Tensor
    bias: Tensor
    running_mean: Tensor
    running_var: Tensor

    def __init__(self, num_features: int, eps: float = NORM_EPS) -> None:
        super().__init__()
        self.num_features, self.eps = num_features, eps
        self.register_buffer("weight", torch.ones(num_features))
        self.register_buffer("bias", torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))

    def forward(self, x: Tensor) -> Tensor:
        scale = self.weight * (self.running_var + self.eps).rsqrt()
        shift = self.bias - self.running_mean * scale
        return x * scale.view(1, -1, 1, 1) + shift.view(1, -1, 1, 1)

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}"


def batch_norm(channels: int, frozen: bool) -> nn.Module:
    """A ``FrozenBatchNorm2d`` or a trainable ``BatchNorm2d`` of RT-DETR's epsilon."""
    return FrozenBatchNorm2d(channels) if frozen else nn.BatchNorm2d(channels, eps=NORM_EPS)


class ConvNorm(nn.Module):
    """``act(norm(conv(x)))``; ``act=None`` leaves the activation out.

    Upstream calls this ``ConvNormLayer``; the padding defaults to ``(k - 1) // 2``.
    """

    def __init__(self, c_in: int, c_out: int, k: int, s: int = 1, *, act: type[nn.Module] | None = None,
                 frozen: bool = False, padding: int | None = None, groups: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, k, s, (k - 1) // 2 if padding is None else padding, groups=groups,
                              bias=False)
        self.norm = batch_norm(c_out, frozen)
        self.act = act() if act is not None else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.norm(self.conv(x)))

    def fuse_for_inference(self) -> bool:
        """Fold ``norm`` into ``conv`` (see ``layers.fuse``; frozen norms fold alike)."""
        if isinstance(self.norm, nn.Identity):
            return False
        self.conv = fold_batchnorm(self.conv, self.norm)  # type: ignore[arg-type]
        self.norm = nn.Identity()
        return True
