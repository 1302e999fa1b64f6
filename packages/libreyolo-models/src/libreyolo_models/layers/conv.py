"""Convolution + BatchNorm + activation, the unit every YOLO family is built from.

Attribute names (``conv``, ``bn``) are checkpoint keys shared with upstream LibreYOLO weights:
treat them as a file format.
"""

from __future__ import annotations

from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .fuse import fold_batchnorm

# Upstream YOLO BatchNorm settings (not stored in checkpoints, so they must be rebuilt here).
BN_EPS = 1e-3
BN_MOMENTUM = 0.03


def same_padding(kernel: int, dilation: int = 1) -> int:
    """Padding that keeps the spatial size at stride 1 for an odd kernel."""
    return dilation * (kernel - 1) // 2


class SiLU(nn.SiLU):
    """SiLU in place when no gradient is recorded, out of place when one is.

    In place under autograd costs more, not less: SiLU's backward needs its input, so autograd
    copies the tensor before overwriting it (a clone kernel and a full activation copy per layer,
    179 of them in a YOLOv9-t training forward). Out of place it is one kernel; in inference,
    in place saves an allocation. The values are the same either way.
    """

    def __init__(self) -> None:
        super().__init__(inplace=False)

    def forward(self, x: Tensor) -> Tensor:
        return F.silu(x, inplace=not (torch.is_grad_enabled() and x.requires_grad))


class BatchNorm2d(nn.BatchNorm2d):
    """BatchNorm that does not count its training batches when its momentum is fixed.

    ``nn.BatchNorm2d`` adds 1 to ``num_batches_tracked`` on every training forward: a kernel of
    its own per layer (221 in a YOLOv9-t step, in a step whose time is the host's launching). The
    counter only matters for ``momentum=None`` (a cumulative average), which keeps the standard
    behaviour here; with a fixed momentum the result is the same and the buffer, still saved
    under its usual key, stays as loaded. Its version counter still moves (a host-side bump, no
    kernel), which is how a fused inference copy notices statistics that changed
    (``fused_net.stamp_slots``).
    """

    def forward(self, x: Tensor) -> Tensor:
        if self.momentum is None or not (self.training and self.track_running_stats):
            return super().forward(x)
        self._check_input_dim(x)
        if self.num_batches_tracked is not None:  # the statistics change: say so, without a kernel
            torch.autograd.graph.increment_version(self.num_batches_tracked)
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, True, self.momentum,
                            self.eps)


class Conv(nn.Module):
    """``act(bn(conv(x)))`` with a bias-free convolution; ``act=False`` leaves the activation out."""

    def __init__(self, c_in: int, c_out: int, k: int = 1, s: int = 1, p: int | None = None,
                 g: int = 1, act: bool = True) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, k, s, same_padding(k) if p is None else p, groups=g, bias=False)
        self.bn = BatchNorm2d(c_out, eps=BN_EPS, momentum=BN_MOMENTUM)
        self.act: nn.Module = SiLU() if act else nn.Identity()  # subclasses swap in their own activation

    folded = False
    """Set on the fused inference copy's units: ``bn`` is folded into ``conv``."""

    def forward(self, x: Tensor) -> Tensor:
        if self.folded:  # the same kernels, without three module calls (eager predict is launch-bound)
            # The registries read directly: nn.Module.__getattr__ (a Python call per name) was
            # three quarters of its calls in an eager predict, about 4 a unit.
            modules = self._modules
            conv: Any = modules["conv"]  # an nn.Conv2d (padding may be a string: Any, as self.conv is)
            params = conv._parameters
            y = F.conv2d(x, params["weight"], params["bias"], conv.stride, conv.padding, conv.dilation, conv.groups)
            act = cast(nn.Module, modules["act"])
            if isinstance(act, SiLU):
                return F.silu(y, inplace=not (torch.is_grad_enabled() and y.requires_grad))
            return cast(Tensor, act(y))
        return self.act(self.bn(self.conv(x)))

    def fuse_for_inference(self) -> bool:
        """Fold ``bn`` into ``conv`` (see ``layers.fuse``); True when something changed."""
        if not isinstance(self.bn, nn.BatchNorm2d):
            return False
        self.conv = fold_batchnorm(self.conv, self.bn)
        self.bn = nn.Identity()  # type: ignore[assignment]  # folded into conv
        self.folded = self.conv.padding_mode == "zeros"  # what F.conv2d computes without padding arguments
        return True
