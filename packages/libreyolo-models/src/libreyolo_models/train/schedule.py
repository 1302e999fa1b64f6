"""Learning-rate schedule: linear or cosine decay over epochs, with a per-iteration warmup."""

from __future__ import annotations

import math

import numpy as np

from .fused_optim import AnyOptimizer


def lr_factor(epoch: float, epochs: int, lrf: float, cosine: bool) -> float:
    """Multiplier of lr0 at ``epoch``: from 1 down to ``lrf`` at the last epoch."""
    progress = min(max(epoch / max(epochs, 1), 0.0), 1.0)
    if cosine:
        return ((1 - math.cos(progress * math.pi)) / 2) * (lrf - 1) + 1
    return (1 - progress) * (1.0 - lrf) + lrf


WARMUP_FLOOR = 100
"""Warmup iterations a run gets at least (when it warms up at all), so tiny datasets still warm up..."""

WARMUP_FLOOR_SHARE = 0.3
"""...but the floor takes at most this share of the run's iterations. Without the cap a 10-epoch
run over 13 batches an epoch (400 images at batch 32) spent 100 of its 130 iterations in warmup
and ended at mAP50 0.05; with it the floor is 39 iterations, the same as ``warmup_epochs=3``."""

MIN_STEPS_PER_EPOCH = 16
"""Optimizer steps an epoch keeps at least, whatever ``nbs`` asks: accumulating to the nominal
batch must not leave a small dataset with a handful of updates per epoch (400 images at batch 32
and nbs 64 gave 7). A dataset of ``16 * nbs`` images or more is unaffected."""


def warmup_iterations(warmup_epochs: float, batches_per_epoch: int, epochs: int | None = None) -> int:
    """Warmup length in iterations: ``warmup_epochs`` worth, and at least ``WARMUP_FLOOR``
    iterations, the floor capped to ``WARMUP_FLOOR_SHARE`` of the run's ``epochs`` (when given).

    An explicit ``warmup_epochs`` longer than that share is kept: only the floor is capped.
    """
    if warmup_epochs <= 0:
        return 0
    floor = WARMUP_FLOOR
    if epochs is not None:
        floor = min(floor, max(round(WARMUP_FLOOR_SHARE * epochs * batches_per_epoch), 1))
    return max(round(warmup_epochs * batches_per_epoch), floor)


def nominal_accumulation(nbs: int, batch: int, batches_per_epoch: int | None = None) -> int:
    """Micro-batches per optimizer step after warmup: ``nbs / batch`` (at least 1), lowered so an
    epoch of ``batches_per_epoch`` micro-batches still holds ``MIN_STEPS_PER_EPOCH`` steps."""
    full = max(round(nbs / batch), 1)
    if batches_per_epoch is not None:
        full = min(full, max(batches_per_epoch // MIN_STEPS_PER_EPOCH, 1))
    return full


def apply_lr(optimizer: AnyOptimizer, *, iteration: int, warmup_iters: int, epoch: int, epochs: int,
             lrf: float, cosine: bool, warmup_bias_lr: float, warmup_momentum: float, momentum: float) -> None:
    """Set every group's lr (and momentum) for this iteration.

    During warmup the bias group falls from ``warmup_bias_lr`` while the others rise from 0, all
    toward the scheduled value; momentum rises from ``warmup_momentum``.
    """
    factor = lr_factor(epoch, epochs, lrf, cosine)
    for group in optimizer.param_groups:
        target = group["initial_lr"] * factor
        if iteration < warmup_iters:
            start = warmup_bias_lr if group.get("group") == "bias" else 0.0
            group["lr"] = float(np.interp(iteration, [0, warmup_iters], [start, target]))
            if "momentum" in group:
                group["momentum"] = float(np.interp(iteration, [0, warmup_iters], [warmup_momentum, momentum]))
        else:
            group["lr"] = target


def accumulate_steps(iteration: int, warmup_iters: int, nbs: int, batch: int,
                     batches_per_epoch: int | None = None) -> int:
    """Micro-batches per optimizer step: ramps from 1 to ``nominal_accumulation`` during warmup."""
    full = nominal_accumulation(nbs, batch, batches_per_epoch)
    if iteration >= warmup_iters:
        return full
    return max(1, round(float(np.interp(iteration, [0, warmup_iters], [1, full]))))
