"""Optimizer construction over the family's parameter groups, and layout repair on resume."""

from __future__ import annotations

import logging
from typing import Any

import torch

from .fused_optim import FusedOptimizer, relaid_like
from .settings import TrainConfig

log = logging.getLogger(__name__)

def build_optimizer(groups: list[dict[str, Any]], cfg: TrainConfig, *, iterations: int) -> FusedOptimizer:
    """SGD (Nesterov), Adam or AdamW over the family's parameter groups (``Family.parameter_groups``).

    ``optimizer="auto"`` picks AdamW for short runs (under ~10k iterations, where SGD's warm start
    is too slow) and SGD otherwise; the choice is logged. A group's ``lr_scale`` multiplies the
    base learning rate (a pretrained backbone trained slower than its head). The update is
    torch's fused kernel, one per group on any device (``fused_optim`` says why not through
    ``torch.optim``): never one Python-level update per tensor, and on CUDA ``GradScaler`` hands
    it the inf flag as a tensor instead of reading it back.
    """
    name, lr, momentum = cfg.optimizer, cfg.lr0, cfg.momentum
    if name == "auto":
        name = "AdamW" if iterations <= 10_000 else "SGD"
        if name == "AdamW":
            lr, momentum = 0.002, 0.9
        log.info("optimizer=auto chose %s(lr=%g, momentum=%g) for %d iterations", name, lr, momentum, iterations)
    groups = [dict(g) for g in groups if g["params"]]
    if name == "SGD":
        opt = FusedOptimizer("SGD", groups, lr=lr, momentum=momentum, nesterov=True)
    else:
        opt = FusedOptimizer(name, groups, lr=lr, betas=(momentum, 0.999))
    for group in opt.param_groups:
        group["initial_lr"] = lr * float(group.pop("lr_scale", 1.0))
    log.info("%s: %s", name, ", ".join(f"{g.get('group', i)} {len(g['params'])} tensors (decay {g['weight_decay']:g}"
                                       + (f", lr x{g['initial_lr'] / lr:g}" if g["initial_lr"] != lr else "") + ")"
                                       for i, g in enumerate(opt.param_groups)))
    return opt


def align_state_layout(optimizer: torch.optim.Optimizer) -> int:
    """Lay each restored state tensor of a ``torch.optim`` optimizer out like its parameter;
    returns how many were re-laid.

    ``torch.optim``'s ``load_state_dict`` keeps the layout a checkpoint was saved in, so resuming
    an NCHW run with channels_last parameters (or the reverse) would hand its fused kernels tensors
    whose strides differ from their parameter's. (The trainer's ``FusedOptimizer`` does this in its
    own ``load_state_dict``.) Values are unchanged; only the memory order is.
    """
    moved = 0
    for group in optimizer.param_groups:
        for param in group["params"]:
            for key, value in optimizer.state.get(param, {}).items():
                if torch.is_tensor(value) and value.shape == param.shape and value.stride() != param.stride():
                    optimizer.state[param][key] = relaid_like(value, param)
                    moved += 1
    return moved
