"""The cross-rank loss normaliser: one count (positives, soft labels) summed over every rank.

A loss that divides each rank's sum by its own count would weigh a rank with few positives more
than one process on the whole batch does; dividing by the global count (and multiplying by the
world size, which DDP's gradient average divides back out) gives exactly the single-process loss.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor


def global_normalizer(local: Tensor, normalizer_sum: Callable[[Tensor], Tensor] | None) -> Tensor:
    """``local`` summed over ranks through ``normalizer_sum`` (called exactly once; None: one
    process), detached, as a 0-d float32 tensor on ``local``'s device, clamped to >= 1 only after
    the reduce (clamping first would make ranks disagree).

    Raises:
        TypeError: ``normalizer_sum`` did not return a one-element tensor.
    """
    local = local.detach().float().reshape(())
    total = local if normalizer_sum is None else normalizer_sum(local)
    if not isinstance(total, Tensor) or total.numel() != 1:
        raise TypeError(f"normalizer_sum returned {type(total).__name__} "
                        f"{tuple(total.shape) if isinstance(total, Tensor) else ''}; it must return a "
                        "one-element tensor, the sum of its argument over ranks (all-reduce-sum)")
    return total.detach().reshape(()).to(local.device, local.dtype).clamp(min=1.0)
