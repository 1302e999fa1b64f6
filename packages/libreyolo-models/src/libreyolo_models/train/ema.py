"""Exponential moving average of the weights: smoother, usually better, what we validate and save."""

from __future__ import annotations

import copy
import math

import torch
from torch import nn


class ModelEMA:
    """Keeps ``ema = d * ema + (1 - d) * weights`` after every optimizer step.

    The decay ramps up (``d = decay * (1 - exp(-updates / tau))``) so early, fast-changing
    weights are not averaged with the random start. Buffers (BatchNorm statistics) are copied.
    """

    def __init__(self, net: nn.Module, decay: float = 0.9999, tau: float = 2000.0, updates: int = 0) -> None:
        self.ema = copy.deepcopy(_unwrap(net)).eval()
        for p in self.ema.parameters():
            p.requires_grad_(False)
        self.decay, self.tau, self.updates = decay, tau, updates

    def current_decay(self) -> float:
        return self.decay * (1 - math.exp(-self.updates / self.tau))

    @torch.no_grad()
    def update(self, net: nn.Module) -> None:
        self.updates += 1
        d = self.current_decay()
        source = _unwrap(net).state_dict()
        for key, value in self.ema.state_dict().items():
            new = source[key].detach()
            if value.dtype.is_floating_point:
                value.mul_(d).add_(new.to(value.dtype), alpha=1 - d)
            else:
                value.copy_(new)


def _unwrap(net: nn.Module) -> nn.Module:
    return net.module if hasattr(net, "module") else net
