"""Tensor comparisons for parity checks: bitwise equality, absolute difference, ulp distance.

Bitwise means the bit patterns match: ``torch.equal`` would call -0.0 equal to +0.0 and
NaN unequal to itself, which is the wrong question when asking "did the graph compute exactly
what eager computed".
"""

from __future__ import annotations

import torch
from torch import Tensor

_INT_OF_WIDTH = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _as_bits(t: Tensor) -> Tensor:
    t = t.detach()
    if t.is_complex():
        t = torch.view_as_real(t)
    if t.dtype == torch.bool:
        return t
    if t.is_floating_point():
        return t.contiguous().view(_INT_OF_WIDTH[t.element_size()])
    return t


def bitwise_equal(a: Tensor, b: Tensor) -> bool:
    """Same shape, dtype and bit pattern everywhere (NaN payloads and signed zeros included)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.device != b.device:
        b = b.to(a.device)
    return bool(torch.equal(_as_bits(a), _as_bits(b)))


def max_abs_diff(a: Tensor, b: Tensor) -> float:
    """Largest absolute difference, in float64; NaN where exactly one side is NaN; 0.0 if empty.

    Infinite where shapes differ, so a caller can treat the result as "how far apart".
    """
    if a.shape != b.shape:
        return float("inf")
    if a.numel() == 0:
        return 0.0
    x = (
        a.detach().to("cpu", torch.float64)
        if not a.is_complex()
        else a.detach().abs().to("cpu", torch.float64)
    )
    y = (
        b.detach().to("cpu", torch.float64)
        if not b.is_complex()
        else b.detach().abs().to("cpu", torch.float64)
    )
    both_nan = torch.isnan(x) & torch.isnan(y)
    diff = torch.where(both_nan, torch.zeros_like(x), (x - y).abs())
    same_inf = (x == y) & torch.isinf(x)
    diff = torch.where(same_inf, torch.zeros_like(diff), diff)
    return float(diff.max())


def _ordered(t: Tensor) -> Tensor:
    # Map sign-magnitude floats to integers that order like the floats, so neighbouring
    # representable values differ by one: negative patterns are mirrored below zero.
    bits = t.detach().contiguous().view(_INT_OF_WIDTH[t.element_size()]).to(torch.int64)
    magnitude_mask = (1 << (8 * t.element_size() - 1)) - 1
    magnitude = bits & magnitude_mask
    return torch.where(bits < 0, -magnitude, magnitude)


def max_ulp_distance(a: Tensor, b: Tensor) -> int | None:
    """Largest distance in units in the last place; None if not comparable floats of one dtype."""
    if a.shape != b.shape or a.dtype != b.dtype or not a.is_floating_point():
        return None
    if a.numel() == 0:
        return 0
    distance = (_ordered(a.to("cpu")) - _ordered(b.to("cpu"))).abs()
    return int(distance.max())
