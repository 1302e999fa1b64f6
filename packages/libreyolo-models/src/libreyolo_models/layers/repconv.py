"""RepVGG-style re-parameterisable 3x3 convolution as YOLOv7 and DAMO-YOLO build it: a 3x3 conv-BN,
a 1x1 conv-BN and (optionally) an identity BN, summed before the activation; after training the
three branches fold into one 3x3 convolution with a bias (``rbr_reparam``).

Why here: YOLOv7's ``RepConv`` trains in branch form and fuses for inference; DAMO-YOLO's published
layout is the folded one, and branch-form files of it are folded on load. Both need the same
arithmetic (:func:`fold_rep_branches`). The attribute names (``rbr_dense``, ``rbr_1x1``,
``rbr_identity``, ``rbr_reparam``) are checkpoint keys of both families; the branches' inner names
differ (YOLOv7: ``0``/``1``, DAMO-YOLO: ``conv``/``bn``), hence ``branch_names``. (YOLO-NAS's
QARepVGG, with its own layout and scaling, is a separate block.)
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .conv import BN_EPS, BN_MOMENTUM, BatchNorm2d

BRANCH_NAMES_YOLO7 = ("0", "1")
BRANCH_NAMES_DAMO = ("conv", "bn")


def _bn_scale_shift(weight: Tensor, bias: Tensor, mean: Tensor, var: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    scale = weight.double() / torch.sqrt(var.double() + eps)
    return scale, bias.double() - mean.double() * scale


def fold_rep_branches(dense: tuple[Tensor, Mapping[str, Tensor]], one: tuple[Tensor, Mapping[str, Tensor]],
                      identity: Mapping[str, Tensor] | None = None, *, eps: float = BN_EPS,
                      groups: int = 1) -> tuple[Tensor, Tensor]:
    """The 3x3 kernel and bias equal to ``bn3(conv3(x)) + bn1(conv1(x)) [+ bn_id(x)]`` in eval mode.

    Args:
        dense, one: each ``(conv weight, bn state)``; the bn state holds ``weight``, ``bias``,
            ``running_mean`` and ``running_var``. The 1x1 kernel is zero-padded to 3x3 (centred).
        identity: the identity branch's bn state, or None.
        eps: the BatchNorms' eps (1e-3 in both families).
        groups: the convolutions' groups (the identity kernel is per group).

    Returns:
        ``(kernel, bias)`` in float64, ``[c_out, c_in / groups, 3, 3]`` and ``[c_out]``.
    """
    if groups < 1:
        raise ValueError(f"groups={groups} must be >= 1")
    w3, bn3 = dense
    w1, bn1 = one
    s3, b3 = _bn_scale_shift(bn3["weight"], bn3["bias"], bn3["running_mean"], bn3["running_var"], eps)
    s1, b1 = _bn_scale_shift(bn1["weight"], bn1["bias"], bn1["running_mean"], bn1["running_var"], eps)
    kernel = w3.double() * s3.view(-1, 1, 1, 1) + F.pad(w1.double(), [1, 1, 1, 1]) * s1.view(-1, 1, 1, 1)
    bias = b3 + b1
    if identity is not None:
        si, bi = _bn_scale_shift(identity["weight"], identity["bias"], identity["running_mean"],
                                 identity["running_var"], eps)
        c_out, per_group = kernel.shape[0], kernel.shape[1]
        eye = torch.zeros_like(kernel)
        eye[torch.arange(c_out), torch.arange(c_out) % per_group, 1, 1] = 1.0
        kernel = kernel + eye * si.view(-1, 1, 1, 1)
        bias = bias + bi
    return kernel, bias


def _conv_bn(c_in: int, c_out: int, k: int, stride: int, groups: int, names: tuple[str, str]) -> nn.Sequential:
    conv = nn.Conv2d(c_in, c_out, k, stride, k // 2, groups=groups, bias=False)
    return nn.Sequential(OrderedDict([(names[0], conv), (names[1], BatchNorm2d(c_out, eps=BN_EPS, momentum=BN_MOMENTUM))]))


def _bn_state(bn: nn.Module) -> dict[str, Tensor]:
    return {k: v for k, v in bn.state_dict().items() if k != "num_batches_tracked"}


class RepConv3x3(nn.Module):
    """``act(bn(conv3x3(x)) + bn(conv1x1(x)) [+ bn(x)])``, foldable into ``act(conv3x3'(x))``.

    Args:
        c_in, c_out, stride, groups: of the 3x3 convolution (the 1x1 one matches it).
        act: the activation after the sum.
        identity: add the identity BN branch (YOLOv7 adds it when ``c_in == c_out`` and stride 1).
        branch_names: names of the conv and BN inside each branch (checkpoint keys).
    """

    def __init__(self, c_in: int, c_out: int, stride: int = 1, groups: int = 1, *, act: nn.Module,
                 identity: bool = False, branch_names: tuple[str, str] = BRANCH_NAMES_YOLO7) -> None:
        super().__init__()
        if identity and (c_in != c_out or stride != 1):
            raise ValueError(f"an identity branch needs c_in == c_out and stride 1; got {c_in}->{c_out}, stride {stride}")
        self.groups = groups
        self.act = act
        self.rbr_identity = BatchNorm2d(c_in, eps=BN_EPS, momentum=BN_MOMENTUM) if identity else None
        self.rbr_dense: nn.Sequential | None = _conv_bn(c_in, c_out, 3, stride, groups, branch_names)
        self.rbr_1x1: nn.Sequential | None = _conv_bn(c_in, c_out, 1, stride, groups, branch_names)
        self.rbr_reparam: nn.Conv2d | None = None

    def forward(self, x: Tensor) -> Tensor:
        if self.rbr_reparam is not None:
            return self.act(self.rbr_reparam(x))
        assert self.rbr_dense is not None and self.rbr_1x1 is not None  # set together with rbr_reparam
        y = self.rbr_dense(x) + self.rbr_1x1(x)
        if self.rbr_identity is not None:
            y = y + self.rbr_identity(x)
        return self.act(y)

    def fuse_for_inference(self) -> bool:
        """Replace the branches by one 3x3 convolution with a bias (``rbr_reparam``); new modules
        only, so a fused copy never writes into the weights it shares with the trained network."""
        if self.rbr_reparam is not None or self.rbr_dense is None or self.rbr_1x1 is None:
            return False
        dense_conv, dense_bn = self.rbr_dense[0], self.rbr_dense[1]
        one_conv, one_bn = self.rbr_1x1[0], self.rbr_1x1[1]
        assert isinstance(dense_conv, nn.Conv2d) and isinstance(one_conv, nn.Conv2d)
        kernel, bias = fold_rep_branches(
            (dense_conv.weight.detach(), _bn_state(dense_bn)), (one_conv.weight.detach(), _bn_state(one_bn)),
            _bn_state(self.rbr_identity) if self.rbr_identity is not None else None,
            eps=float(dense_bn.eps), groups=self.groups)  # type: ignore[arg-type]
        fused = nn.Conv2d(dense_conv.in_channels, dense_conv.out_channels, 3, dense_conv.stride[0], 1,
                          groups=self.groups, bias=True, device=kernel.device, dtype=dense_conv.weight.dtype)
        with torch.no_grad():
            fused.weight.copy_(kernel)
            fused.bias.copy_(bias)  # type: ignore[union-attr]
        fused.requires_grad_(False)
        self.rbr_reparam = fused
        self.rbr_dense = self.rbr_1x1 = None
        self.rbr_identity = None
        return True
