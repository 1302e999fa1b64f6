"""Exponential moving average of the weights: smoother, usually better, what we validate and save."""

from __future__ import annotations

import copy
import math

import torch
from torch import Tensor, nn


class ModelEMA:
    """Keeps ``ema = d * ema + (1 - d) * weights`` after every optimizer step.

    The decay ramps up (``d = decay * (1 - exp(-updates / tau))``) so early, fast-changing
    weights are not averaged with the random start. Buffers (BatchNorm statistics) are averaged
    too; integer buffers are copied. The update is two fused multi-tensor kernels, not one small
    kernel per tensor: at ~1,300 state entries the per-tensor loop cost more than a graphed
    forward and backward.
    """

    def __init__(self, net: nn.Module, decay: float = 0.9999, tau: float = 2000.0, updates: int = 0) -> None:
        self.ema = copy.deepcopy(_unwrap(net)).eval()
        for p in self.ema.parameters():
            p.requires_grad_(False)
        self.decay, self.tau, self.updates = decay, tau, updates
        self._pairs: tuple[int, list[Tensor], list[Tensor], list[Tensor], list[Tensor]] | None = None

    def current_decay(self) -> float:
        return self.decay * (1 - math.exp(-self.updates / self.tau))

    def _paired(self, net: nn.Module) -> tuple[list[Tensor], list[Tensor], list[Tensor], list[Tensor]]:
        """(ema floats, source floats, ema others, source others), cached per source network."""
        if self._pairs is None or self._pairs[0] != id(net):
            source = net.state_dict()
            floats_e, floats_s, other_e, other_s = [], [], [], []
            seen: set[int] = set()
            for key, value in self.ema.state_dict().items():
                # A tensor shared under several keys (RTMDet's head convs) is averaged once, not
                # once per key (which would decay it at d**n).
                if value.numel() and value.data_ptr() in seen:
                    continue
                seen.add(value.data_ptr())
                src = source[key].detach()
                if value.dtype.is_floating_point and src.dtype == value.dtype:
                    floats_e.append(value)
                    floats_s.append(src)
                else:
                    other_e.append(value)
                    other_s.append(src)
            self._pairs = (id(net), floats_e, floats_s, other_e, other_s)
        return self._pairs[1:]

    @torch.no_grad()
    def update(self, net: nn.Module) -> None:
        self.updates += 1
        d = self.current_decay()
        floats_e, floats_s, other_e, other_s = self._paired(_unwrap(net))
        if floats_e:
            torch._foreach_lerp_(floats_e, floats_s, 1.0 - d)
        for value, src in zip(other_e, other_s):
            if value.dtype.is_floating_point:
                value.lerp_(src.to(value.dtype), 1.0 - d)
            else:
                value.copy_(src)

    def load_state_dict(self, state: dict[str, Tensor], updates: int) -> None:
        self.ema.load_state_dict(state)
        self.updates = updates


def _unwrap(net: nn.Module) -> nn.Module:
    inner = getattr(net, "module", net)  # DDP keeps the network under .module
    return inner if isinstance(inner, nn.Module) else net
