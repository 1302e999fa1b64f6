"""Optimizer construction over the family's parameter groups, and layout repair on resume."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import ConfigError
from .fused_optim import FusedOptimizer, relaid_like
from .settings import TrainConfig

log = logging.getLogger(__name__)

AUTO_ADAMW_ITERATIONS = 10_000
"""``optimizer="auto"`` picks AdamW for runs of at most this many optimizer steps, SGD beyond."""

AUTO_ADAMW = {"lr0": 0.002, "momentum": 0.9}
"""AdamW's own settings under ``optimizer="auto"``, for those of ``lr0``/``momentum`` the user left unset."""


@dataclass(frozen=True)
class OptimizerChoice:
    """The optimizer a run trains with: its kind, base learning rate and momentum (Adam's beta1).
    Training checkpoints record it, so a resumed run keeps it whatever its new length."""

    name: str
    lr0: float
    momentum: float

    def as_dict(self) -> dict[str, Any]:
        return {"optimizer": self.name, "lr0": self.lr0, "momentum": self.momentum}

    @classmethod
    def from_dict(cls, saved: dict[str, Any]) -> OptimizerChoice:
        return cls(str(saved["optimizer"]), float(saved["lr0"]), float(saved["momentum"]))


def choose_optimizer(cfg: TrainConfig, *, iterations: int, explicit: frozenset[str] = frozenset()) -> OptimizerChoice:
    """The run's optimizer (logged). A named kind takes ``lr0`` and ``momentum`` as they are.

    ``optimizer="auto"`` picks the kind by run length: AdamW for short runs (up to
    ``AUTO_ADAMW_ITERATIONS`` steps, where SGD's warm start is too slow), with AdamW's own ``lr0``
    0.002 and ``momentum`` 0.9, and SGD with ``lr0``/``momentum`` otherwise. An ``lr0`` or
    ``momentum`` the user set (``explicit``: the option names they gave) is always honoured; the
    log line says which values are theirs and what auto would have used.
    """
    if cfg.optimizer != "auto":
        return OptimizerChoice(cfg.optimizer, cfg.lr0, cfg.momentum)
    name = "AdamW" if iterations <= AUTO_ADAMW_ITERATIONS else "SGD"
    own = AUTO_ADAMW if name == "AdamW" else {"lr0": cfg.lr0, "momentum": cfg.momentum}
    kept = {k: float(getattr(cfg, k)) for k in ("lr0", "momentum") if k in explicit}
    choice = OptimizerChoice(name, kept.get("lr0", own["lr0"]), kept.get("momentum", own["momentum"]))
    if kept and name == "AdamW":
        log.info("optimizer=auto chose AdamW for %d iterations with your %s (its own: lr0=%g, momentum=%g)",
                 iterations, ", ".join(f"{k}={v:g}" for k, v in kept.items()), own["lr0"], own["momentum"])
    else:
        log.info("optimizer=auto chose %s(lr=%g, momentum=%g) for %d iterations%s", name, choice.lr0,
                 choice.momentum, iterations, "" if name == "SGD" else
                 " (lr0= and momentum= set your own; optimizer=SGD or AdamW picks the kind)")
    return choice


def build_optimizer(groups: list[dict[str, Any]], cfg: TrainConfig, *, iterations: int,
                    choice: OptimizerChoice | None = None) -> FusedOptimizer:
    """SGD (Nesterov), Adam or AdamW over the family's parameter groups (``Family.parameter_groups``).

    ``choice``: the kind and settings (``choose_optimizer``'s, or a resumed run's); None chooses
    now. A group's ``lr_scale`` multiplies the base learning rate (a pretrained backbone trained
    slower than its head). The update is torch's fused kernel, one per group on any device
    (``fused_optim`` says why not through ``torch.optim``): never one Python-level update per
    tensor, and on CUDA ``GradScaler`` hands it the inf flag as a tensor instead of reading it back.
    """
    choice = choice or choose_optimizer(cfg, iterations=iterations)
    name, lr, momentum = choice.name, choice.lr0, choice.momentum
    groups = [dict(g) for g in groups if g["params"]]
    if name == "SGD":  # Nesterov needs a momentum: momentum=0 is plain SGD
        opt = FusedOptimizer("SGD", groups, lr=lr, momentum=momentum, nesterov=momentum > 0)
    else:
        opt = FusedOptimizer(name, groups, lr=lr, betas=(momentum, 0.999))
    for group in opt.param_groups:
        group["initial_lr"] = lr * float(group.pop("lr_scale", 1.0))
    log.info("%s: %s", name, ", ".join(f"{g.get('group', i)} {len(g['params'])} tensors (decay {g['weight_decay']:g}"
                                       + (f", lr x{g['initial_lr'] / lr:g}" if g["initial_lr"] != lr else "") + ")"
                                       for i, g in enumerate(opt.param_groups)))
    return opt


def scale_backbone_groups(net: torch.nn.Module, groups: list[dict[str, Any]], scale: float,
                          family: str) -> list[dict[str, Any]]:
    """``groups`` with every group made only of ``net.backbone``'s parameters at ``lr_scale``
    ``scale`` (the ``backbone_lr_scale`` option): a family's recipe slows a backbone it expects
    pretrained (EC 0.05x, RT-DETR 0.1x, RF-DETR's ViT layer by layer), which holds an untrained
    one back. Groups that mix backbone and other parameters keep their rate; a family whose groups
    never separate the backbone is told so."""
    backbone = getattr(net, "backbone", None)
    ids = {id(p) for p in backbone.parameters()} if isinstance(backbone, torch.nn.Module) else set()
    out, hit = [], False
    for group in groups:
        if ids and group["params"] and all(id(p) in ids for p in group["params"]):
            group, hit = {**group, "lr_scale": scale}, True
        out.append(group)
    if not hit:
        raise ConfigError(f"backbone_lr_scale={scale:g}: {family} trains its backbone in the same optimizer "
                          "groups as the rest of the network, at one rate (lr0); leave backbone_lr_scale out")
    log.info("backbone_lr_scale=%g: the backbone's groups train at %g x lr0 (instead of the recipe's rates)",
             scale, scale)
    return out


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
