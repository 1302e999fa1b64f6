"""Re-parameterisable 3x3 blocks (RepVGG family): several parallel branches while training, one
convolution for inference.

A RepVGG block adds a 3x3 conv, a 1x1 conv and (when shapes allow) the identity before its
activation; all three are linear in the input, so their sum is one 3x3 convolution whose kernel
is the sum of the branch kernels (the 1x1 centred in a 3x3, the identity as a one-hot kernel).
The QARepVGG variant (YOLO-NAS, from "Make RepVGG Greater Again") keeps the BatchNorm off the
1x1 and identity branches and puts one BatchNorm after the sum instead, which keeps the fused
kernel's value range quantisation-friendly; it folds just the same.

The branch algebra lives in the functions below (float64, so a fused kernel agrees with the
branches to float32 rounding); other RepVGG-style blocks (RepConv with a BatchNorm on every
branch) can build their fusion from them. Attribute names of :class:`QARepVGGBlock`
(``branch_3x3``, ``branch_1x1``, ``post_bn``, ``rbr_reparam``, ``alpha``) are checkpoint keys
of YOLO-NAS weights (SuperGradients' and upstream LibreYOLO's): treat them as a file format.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .conv import BN_EPS, BN_MOMENTUM, BatchNorm2d


def batchnorm_scale_shift(bn: nn.BatchNorm2d) -> tuple[Tensor, Tensor]:
    """``(scale, shift)`` in float64 with ``bn(x) == x * scale + shift`` in eval mode (per channel)."""
    if bn.running_mean is None or bn.running_var is None:
        raise ValueError(f"cannot fold {bn}: it tracks no running statistics")
    mean, var = bn.running_mean.double(), bn.running_var.double()
    gamma = bn.weight.double() if bn.weight is not None else torch.ones_like(mean)
    beta = bn.bias.double() if bn.bias is not None else torch.zeros_like(mean)
    scale = gamma / torch.sqrt(var + bn.eps)
    return scale, beta - mean * scale


def fold_into_kernel(kernel: Tensor, bias: Tensor, bn: nn.BatchNorm2d) -> tuple[Tensor, Tensor]:
    """``bn`` applied after a convolution of ``kernel`` ``[O, I/g, k, k]`` and ``bias`` ``[O]``:
    the equivalent kernel and bias, float64."""
    scale, shift = batchnorm_scale_shift(bn)
    return kernel.double() * scale.view(-1, 1, 1, 1), bias.double() * scale + shift


def centred_kernel(kernel: Tensor, size: int) -> Tensor:
    """A ``k x k`` kernel zero-padded (centred) to ``size x size``: the same convolution when the
    padding grows by ``(size - k) / 2``."""
    pad = (size - kernel.shape[-1]) // 2
    if pad < 0 or (size - kernel.shape[-1]) % 2:
        raise ValueError(f"cannot centre a {kernel.shape[-1]}x{kernel.shape[-1]} kernel in {size}x{size}")
    return F.pad(kernel, [pad, pad, pad, pad])


def identity_kernel(channels: int, groups: int, size: int, *, device: torch.device | None = None) -> Tensor:
    """The ``[C, C/g, size, size]`` float64 kernel whose convolution returns its input (one-hot centre)."""
    per_group = channels // groups
    kernel = torch.zeros(channels, per_group, size, size, dtype=torch.float64, device=device)
    kernel[torch.arange(channels), torch.arange(channels) % per_group, size // 2, size // 2] = 1.0
    return kernel


class ConvBN(nn.Module):
    """``bn(conv(x))``: a bias-free convolution and its BatchNorm (a RepVGG branch; keys ``conv``, ``bn``)."""

    def __init__(self, c_in: int, c_out: int, k: int, stride: int, *, bn_eps: float, bn_momentum: float) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, k, stride, k // 2, bias=False)
        self.bn = BatchNorm2d(c_out, eps=bn_eps, momentum=bn_momentum)

    def forward(self, x: Tensor) -> Tensor:
        return self.bn(self.conv(x))


class QARepVGGBlock(nn.Module):
    """QARepVGG: ``act(post_bn(bn(conv3x3(x)) + alpha * conv1x1(x) + x))``; fuses into one conv.

    Args:
        c_in, c_out: channels.
        stride: 1 or 2 (the identity branch only exists at stride 1 with ``c_in == c_out``).
        residual: add the identity branch (upstream's ``use_residual_connection``).
        use_alpha: a learnable scale ``alpha`` on the 1x1 branch (a 1-element parameter); else 1.
        act: the activation module (YOLO-NAS: ReLU).
        bn_eps, bn_momentum: of both BatchNorms (YOLO-NAS trains with 1e-3 and 0.03).

    ``rbr_reparam`` is the fused convolution upstream keeps in every checkpoint even while the
    branches are in use; here it is a frozen parameter (saved and loaded, never trained, never
    read by the multi-branch forward) so that checkpoints keep upstream's layout and DDP does not
    wait for gradients it never gets. :meth:`fuse_for_inference` builds a fresh one from the
    branches (``layers.fuse``: it never writes into shared tensors).
    """

    fused = False
    """True on the fused inference copy: only ``rbr_reparam`` and the activation remain."""

    def __init__(self, c_in: int, c_out: int, stride: int = 1, *, residual: bool = True, use_alpha: bool = False,
                 act: nn.Module | None = None, bn_eps: float = BN_EPS, bn_momentum: float = BN_MOMENTUM) -> None:
        super().__init__()
        if residual and (c_in != c_out or stride != 1):
            raise ValueError(f"a QARepVGG identity branch needs c_in == c_out and stride 1; got {c_in} -> {c_out} "
                             f"at stride {stride}: pass residual=False")
        self.c_in, self.c_out, self.stride, self.residual = c_in, c_out, stride, residual
        # Upstream registers alpha before the branches: its key comes first in the state dict.
        self.alpha: nn.Parameter | float = nn.Parameter(torch.ones(1)) if use_alpha else 1.0
        self.nonlinearity = act if act is not None else nn.ReLU()
        self.se = nn.Identity()  # upstream's squeeze-excitation slot, unused by YOLO-NAS
        self.branch_3x3 = ConvBN(c_in, c_out, 3, stride, bn_eps=bn_eps, bn_momentum=bn_momentum)
        self.branch_1x1 = nn.Conv2d(c_in, c_out, 1, stride, 0, bias=True)
        self.post_bn = BatchNorm2d(c_out, eps=bn_eps, momentum=bn_momentum)
        self.rbr_reparam = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=True)
        self.rbr_reparam.requires_grad_(False)

    def forward(self, x: Tensor) -> Tensor:
        if self.fused:
            return self.se(self.nonlinearity(self.rbr_reparam(x)))
        # Summed in upstream's order (3x3 + 1x1, then the identity), so float rounding matches.
        y = self.branch_3x3(x) + self.alpha * self.branch_1x1(x)
        if self.residual:
            y = y + x
        return self.se(self.nonlinearity(self.post_bn(y)))

    def fused_kernel(self) -> tuple[Tensor, Tensor]:
        """The single 3x3 convolution (kernel, bias; float64) equal to the branches and ``post_bn``."""
        conv, bn = self.branch_3x3.conv, self.branch_3x3.bn
        kernel, bias = fold_into_kernel(conv.weight, torch.zeros(self.c_out, device=conv.weight.device), bn)
        alpha = self.alpha.double() if isinstance(self.alpha, Tensor) else float(self.alpha)
        kernel = kernel + alpha * centred_kernel(self.branch_1x1.weight.double(), 3)
        if self.branch_1x1.bias is not None:
            bias = bias + alpha * self.branch_1x1.bias.double()
        if self.residual:
            kernel = kernel + identity_kernel(self.c_in, 1, 3, device=kernel.device)
        return fold_into_kernel(kernel, bias, self.post_bn)

    def fuse_for_inference(self) -> bool:
        """Replace the branches by one convolution (see ``layers.fuse``); True when something changed."""
        if self.fused:
            return False
        reference = self.branch_3x3.conv.weight
        with torch.no_grad():
            kernel, bias = self.fused_kernel()
            conv = nn.Conv2d(self.c_in, self.c_out, 3, self.stride, 1, bias=True, device=reference.device,
                             dtype=reference.dtype)
            conv.weight.copy_(kernel)
            conv.bias.copy_(bias)  # type: ignore[union-attr]  # built with bias=True
        conv.requires_grad_(False)
        self.rbr_reparam = conv
        del self.branch_3x3, self.branch_1x1, self.post_bn  # folded into rbr_reparam
        self.fused = True
        return True
