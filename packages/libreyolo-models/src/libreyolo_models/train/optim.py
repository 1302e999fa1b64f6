"""Optimizer construction: parameter groups, so norms and biases get no weight decay."""

from __future__ import annotations

import logging

import torch
from torch import nn

from .settings import TrainConfig

log = logging.getLogger(__name__)

NORM_TYPES = (nn.BatchNorm2d, nn.SyncBatchNorm, nn.GroupNorm, nn.LayerNorm, nn.InstanceNorm2d)


def parameter_groups(net: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter], list[nn.Parameter]]:
    """(decayed weights, norm weights, biases): decay only pulls conv/linear weights toward zero;
    on norm scales and biases it only hurts."""
    decay, norm, bias = [], [], []
    for module in net.modules():
        for name, param in module.named_parameters(recurse=False):
            if not param.requires_grad:
                continue
            if name == "bias":
                bias.append(param)
            elif isinstance(module, NORM_TYPES):
                norm.append(param)
            else:
                decay.append(param)
    return decay, norm, bias


def build_optimizer(net: nn.Module, cfg: TrainConfig, *, iterations: int, weight_decay: float) -> torch.optim.Optimizer:
    """SGD or AdamW with three groups. ``optimizer="auto"`` picks AdamW for short runs (under ~10k
    iterations, where SGD's warm start is too slow) and SGD otherwise; the choice is logged."""
    name, lr, momentum = cfg.optimizer, cfg.lr0, cfg.momentum
    if name == "auto":
        name = "AdamW" if iterations <= 10_000 else "SGD"
        if name == "AdamW":
            lr, momentum = 0.002, 0.9
        log.info("optimizer=auto chose %s(lr=%g, momentum=%g) for %d iterations", name, lr, momentum, iterations)
    decay, norm, bias = parameter_groups(net)
    groups = [{"params": bias, "weight_decay": 0.0, "group": "bias"},
              {"params": norm, "weight_decay": 0.0, "group": "norm"},
              {"params": decay, "weight_decay": weight_decay, "group": "decay"}]
    # One fused kernel per step on CUDA instead of a few per parameter tensor (~680 here).
    fused = {"fused": True} if next(net.parameters()).is_cuda else {}
    if name == "SGD":
        opt: torch.optim.Optimizer = torch.optim.SGD(groups, lr=lr, momentum=momentum, nesterov=True, **fused)
    else:
        cls = torch.optim.AdamW if name == "AdamW" else torch.optim.Adam
        opt = cls(groups, lr=lr, betas=(momentum, 0.999), **fused)
    for group in opt.param_groups:
        group["initial_lr"] = lr
    log.info("%s: %d weights (decay %g), %d norm weights, %d biases (no decay)",
             name, len(decay), weight_decay, len(norm), len(bias))
    return opt


def align_state_layout(optimizer: torch.optim.Optimizer) -> int:
    """Lay each restored state tensor out like its parameter; returns how many were re-laid.

    ``load_state_dict`` keeps the layout a checkpoint was saved in, so resuming an NCHW run with
    channels_last parameters (or the reverse) would hand the fused kernels tensors whose strides
    differ from their parameter's. Values are unchanged; only the memory order is.
    """
    moved = 0
    for group in optimizer.param_groups:
        for param in group["params"]:
            for key, value in optimizer.state.get(param, {}).items():
                if torch.is_tensor(value) and value.shape == param.shape and value.stride() != param.stride():
                    relaid = torch.empty_like(param, dtype=value.dtype)  # keeps the parameter's strides
                    relaid.copy_(value)
                    optimizer.state[param][key] = relaid
                    moved += 1
    return moved
