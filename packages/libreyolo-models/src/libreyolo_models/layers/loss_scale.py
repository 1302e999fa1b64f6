"""How a dense detection loss is normalised and scaled so that DDP, gradient accumulation and the
learning rate all see the same loss whatever the batch is split into.

Each rank sums its terms (U_r) and divides by one normaliser N summed over all ranks (the count of
positives, or of soft targets), then multiplies by ``world_size``: DDP's gradient average over W
ranks then gives ``sum_r U_r / N``, the single-process loss of the global batch. A further factor
``global_batch`` turns the per-positive mean into a per-image sum, the YOLO convention the learning
rates of the recipes assume (each optimizer step carries about ``nbs`` images' worth of gradient).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ..errors import ConfigError


def check_world_size(world_size: int) -> None:
    """Reject a rank count below 1 (a loss scaled by it would vanish or flip sign)."""
    if world_size < 1:
        raise ConfigError(f"world_size={world_size} must be >= 1 (the number of DDP ranks)")


def check_scaling(batch: int, world_size: int, global_batch: int | None) -> int:
    """The global batch (default ``batch * world_size``), after checking both are >= 1."""
    check_world_size(world_size)
    global_batch = batch * world_size if global_batch is None else global_batch
    if global_batch < 1:
        raise ConfigError(f"global_batch={global_batch} must be >= 1 (images per optimizer step, all ranks)")
    return global_batch


def global_normalizer(local: Tensor, normalizer_sum: Callable[[Tensor], Tensor] | None) -> Tensor:
    """``local`` summed over all ranks, clamped to >= 1 only after the reduce (else ranks disagree).

    ``normalizer_sum`` is called exactly once, whatever the data, so the collective lines up on
    every rank; None means one process.
    """
    local = local.detach().float().reshape(())
    total = local if normalizer_sum is None else normalizer_sum(local)
    if not isinstance(total, Tensor) or total.numel() != 1:
        raise TypeError(f"normalizer_sum returned {type(total).__name__} "
                        f"{tuple(total.shape) if isinstance(total, Tensor) else ''}; it must return a "
                        "one-element tensor, the sum of its argument over ranks (all-reduce-sum)")
    return total.detach().reshape(()).to(local.device, local.dtype).clamp(min=1.0)


def global_normalizers(local: Tensor, normalizer_sum: Callable[[Tensor], Tensor] | None,
                       floors: tuple[float, ...] | None = None) -> Tensor:
    """Several normalisers of one loss (``local``: ``[k]``, rank-local) summed over all ranks in one
    call of ``normalizer_sum`` (so it is still called exactly once per loss call), then each clamped
    to at least its floor (1 by default), after the reduce so that ranks agree. For losses that
    divide different terms by different counts (a second head; PicoDet's positives for the class
    term and quality weights for the box terms). Returns ``[k]`` (unpack it: ``a, b = ...``)."""
    local = local.detach().float().reshape(-1)
    floors = floors if floors is not None else (1.0,) * local.numel()
    if local.numel() != len(floors):
        raise ValueError(f"{local.numel()} normalisers but {len(floors)} floors; pass one floor per normaliser")
    total = local if normalizer_sum is None else normalizer_sum(local)
    if not isinstance(total, Tensor) or total.numel() != local.numel():
        raise TypeError(f"normalizer_sum returned {type(total).__name__} "
                        f"{tuple(total.shape) if isinstance(total, Tensor) else ''}; it must return a tensor "
                        f"shaped like its argument ({local.numel()} elements), its sum over ranks (all-reduce-sum)")
    total = total.detach().reshape(-1).to(local.device, local.dtype)
    return torch.maximum(total, torch.tensor(floors, dtype=total.dtype, device=total.device))
