"""Stochastic depth (drop path) that a CUDA graph can capture.

The keep mask is drawn with ``torch.rand`` on the input's own device from torch's default
generator for that device: no host round trip, no Python random numbers, nothing built on the CPU
and copied over. Inside a captured training graph the draw then comes from the graph's own
Philox stream (torch registers the generator with the graph and advances its offset on every
replay), so each replay gets fresh masks, and eager runs stay reproducible under
``torch.manual_seed``. In eval mode, or at rate 0, the layer is the identity and draws nothing.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def drop_path(x: Tensor, rate: float, training: bool) -> Tensor:
    """Zero whole samples of a residual branch with probability ``rate``; scale the rest by
    ``1 / (1 - rate)`` so the expectation is unchanged.

    Args:
        x: ``[B, ...]`` a residual branch's output (any float dtype).
        rate: drop probability in [0, 1).
        training: draw only when True.
    """
    if not training or rate == 0.0:
        return x
    keep = 1.0 - rate
    shape = (x.shape[0],) + (1,) * (x.dim() - 1)
    mask = torch.rand(shape, device=x.device, dtype=x.dtype).add_(keep).floor_()  # 1 with probability keep
    return x * mask.div_(keep)


class DropPath(nn.Module):
    """:func:`drop_path` as a layer (``rate`` is fixed at construction: it is architecture)."""

    def __init__(self, rate: float) -> None:
        super().__init__()
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"drop path rate={rate} must be in [0, 1)")
        self.rate = float(rate)

    def forward(self, x: Tensor) -> Tensor:
        return drop_path(x, self.rate, self.training)

    def extra_repr(self) -> str:
        return f"rate={self.rate:g}"
