"""Exponential moving average of the weights: smoother, usually better, what we validate and save."""

from __future__ import annotations

import copy
import math
from typing import NamedTuple

import torch
from torch import Tensor, nn

from ..checkpoint import inf_by_design


class _Pairs(NamedTuple):
    """EMA entries and their sources: same-dtype floats (lerped together), integers and inf masks
    (copied together) and floats whose source has another dtype (lerped one by one, after a cast)."""

    floats_e: list[Tensor]
    floats_s: list[Tensor]
    ints_e: list[Tensor]
    ints_s: list[Tensor]
    cast_e: list[Tensor]
    cast_s: list[Tensor]


class ModelEMA:
    """Keeps ``ema = d * ema + (1 - d) * weights`` after every optimizer step.

    The decay ramps up (``d = decay * (1 - exp(-updates / tau))``) so early, fast-changing
    weights are not averaged with the random start. Buffers (BatchNorm statistics) are averaged
    too; integer buffers, and float buffers that hold inf by construction (the DETR anchor grid's
    masked cells, where a lerp would give inf - inf = NaN), are copied. The update is two multi-tensor ops (a lerp over the floats,
    a copy of the integers), not one small kernel per tensor: at ~1,300 state entries the
    per-tensor loop cost more than a graphed forward and backward.
    """

    def __init__(self, net: nn.Module, decay: float = 0.9999, tau: float = 2000.0, updates: int = 0) -> None:
        self.ema = copy.deepcopy(_unwrap(net)).eval()
        for p in self.ema.parameters():
            p.requires_grad_(False)
        self.decay, self.tau, self.updates = decay, tau, updates
        self._pairs: tuple[int, _Pairs] | None = None

    def current_decay(self) -> float:
        return self.decay * (1 - math.exp(-self.updates / self.tau))

    def _paired(self, net: nn.Module) -> _Pairs:
        """The EMA's state entries beside the source's, sorted by how they update; cached per
        source network (the tensors are updated in place, so the lists stay valid)."""
        if self._pairs is None or self._pairs[0] != id(net):
            source = net.state_dict()
            masks = inf_by_design(self.ema.state_dict())
            pairs = _Pairs([], [], [], [], [], [])
            seen: set[int] = set()
            for key, value in self.ema.state_dict().items():
                # A tensor shared under several keys (RTMDet's head convs) is averaged once, not
                # once per key (which would decay it at d**n).
                if value.numel() and value.data_ptr() in seen:
                    continue
                seen.add(value.data_ptr())
                src = source[key].detach()
                if not value.dtype.is_floating_point or key in masks:
                    pairs.ints_e.append(value)
                    pairs.ints_s.append(src)
                elif src.dtype == value.dtype:
                    pairs.floats_e.append(value)
                    pairs.floats_s.append(src)
                else:
                    pairs.cast_e.append(value)
                    pairs.cast_s.append(src)
            self._pairs = (id(net), pairs)
        return self._pairs[1]

    @torch.no_grad()
    def update(self, net: nn.Module) -> None:
        self.updates += 1
        d = self.current_decay()
        pairs = self._paired(_unwrap(net))
        if pairs.floats_e:
            torch._foreach_lerp_(pairs.floats_e, pairs.floats_s, 1.0 - d)
        if pairs.ints_e:  # num_batches_tracked (221 in YOLOv9-t), inf masks: one op, not one each
            torch._foreach_copy_(pairs.ints_e, pairs.ints_s)
        for value, src in zip(pairs.cast_e, pairs.cast_s):  # a source in another float dtype (rare)
            value.lerp_(src.to(value.dtype), 1.0 - d)

    def load_state_dict(self, state: dict[str, Tensor], updates: int) -> None:
        self.ema.load_state_dict(state)
        self.updates = updates


def _unwrap(net: nn.Module) -> nn.Module:
    inner = getattr(net, "module", net)  # DDP keeps the network under .module
    return inner if isinstance(inner, nn.Module) else net
