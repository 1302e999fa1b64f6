"""Learning-rate schedule: linear or cosine decay over epochs, with a per-iteration warmup."""

from __future__ import annotations

import math

import numpy as np
import torch


def lr_factor(epoch: float, epochs: int, lrf: float, cosine: bool) -> float:
    """Multiplier of lr0 at ``epoch``: from 1 down to ``lrf`` at the last epoch."""
    progress = min(max(epoch / max(epochs, 1), 0.0), 1.0)
    if cosine:
        return ((1 - math.cos(progress * math.pi)) / 2) * (lrf - 1) + 1
    return (1 - progress) * (1.0 - lrf) + lrf


def warmup_iterations(warmup_epochs: float, batches_per_epoch: int) -> int:
    """At least 100 iterations, so tiny datasets still warm up."""
    return max(round(warmup_epochs * batches_per_epoch), 100) if warmup_epochs > 0 else 0


def apply_lr(optimizer: torch.optim.Optimizer, *, iteration: int, warmup_iters: int, epoch: int, epochs: int,
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


def accumulate_steps(iteration: int, warmup_iters: int, nbs: int, batch: int) -> int:
    """Micro-batches per optimizer step: ramps from 1 to ``nbs / batch`` during warmup."""
    full = max(round(nbs / batch), 1)
    if iteration >= warmup_iters:
        return full
    return max(1, round(float(np.interp(iteration, [0, warmup_iters], [1, full]))))
