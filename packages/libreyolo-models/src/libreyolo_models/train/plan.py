"""Training options resolved once into a plan that is passed down; nothing below re-parses them.

The merge order: the family's recipe for its task, then the user's options (or, on resume, the
run's saved options), checked by ``TrainConfig``; the recipe's epoch counts capped to their
declared share of a short run (``TaskDecl.recipe_shares``); then the device plan, the image size against
the family's stride, the global batch against the world size, the loss gains against the
family's loss terms, and the SyncBatchNorm choice.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

import libreyolo_ddp

from ..config import load_config
from ..devices import default_device
from ..errors import ConfigError
from .settings import TrainConfig

if TYPE_CHECKING:
    from ..handle import ModelHandle

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainPlan:
    """What every rank trains with.

    Attributes:
        cfg: the merged, checked options (what ``args.yaml`` records).
        devices: the parsed ``device=`` (under torchrun, only its type matters).
        imgsz: the training image size, a multiple of the family's stride.
        gains: every loss term's weight (family defaults overridden by the user's).
        sync_bn: convert BatchNorm to SyncBatchNorm when distributed.
        world_size: ranks that will train (the spawn plan's, or torchrun's).
        explicit: the options the user gave (not the recipe's nor the defaults): ``optimizer="auto"``
            keeps an ``lr0``/``momentum`` named here (``optim.choose_optimizer``).
    """

    cfg: TrainConfig
    devices: libreyolo_ddp.DevicePlan
    imgsz: int
    gains: dict[str, float]
    sync_bn: bool
    world_size: int
    explicit: frozenset[str] = frozenset()

    @property
    def global_batch(self) -> int:
        return self.cfg.batch

    def with_batch(self, batch: int) -> TrainPlan:
        """The plan after autobatch chose the global batch."""
        return replace(self, cfg=replace(self.cfg, batch=batch))


def resolve_plan(model: ModelHandle, options: Mapping[str, Any], source: str, *, resumed: bool = False) -> TrainPlan:
    """Merge and check everything once (see the module docstring). ``resumed``: the options are
    a run's saved ones, recipe included, so the recipe is not applied again."""
    decl = model.spec.task(model.task)
    merged = dict(options) if resumed else {**decl.recipe, **options}
    cfg = load_config(TrainConfig, merged, source)
    if not resumed:
        cfg = scale_recipe_to_run(cfg, decl.recipe_shares, set(options))
    devices = parse_train_devices(cfg.device, source, model.device)
    world = libreyolo_ddp.dist_env().world_size if libreyolo_ddp.is_torchrun() else devices.world_size
    if cfg.batch != -1:
        libreyolo_ddp.split_global_batch(cfg.batch, world)  # fail before any expensive work
    imgsz = model.resolve_imgsz(cfg.imgsz, f"{source}: imgsz")
    if cfg.batch != -1:
        _check_batchnorm_has_values(model, cfg.batch, world, imgsz, source)
    if cfg.multi_scale and not model.task_spec.supports_multi_scale:
        raise ConfigError(f"{source}: multi_scale=True is not supported for task {model.task!r}")
    sync_bn = model.spec.sync_bn_default if cfg.sync_bn is None else cfg.sync_bn
    return TrainPlan(cfg, devices, imgsz, resolve_gains(model, cfg, source), sync_bn, world,
                     explicit=frozenset() if resumed else frozenset(options))


def scale_recipe_to_run(cfg: TrainConfig, shares: Mapping[str, float], user_keys: set[str]) -> TrainConfig:
    """Cap each epoch-counted recipe value to its declared share of ``cfg.epochs`` (logged), except
    the ones the user set: a COCO recipe's 5 warmup epochs are 2 % of 300 but 42 % of 12."""
    changes: dict[str, Any] = {}
    for key, share in shares.items():
        if key in user_keys:
            continue
        value = getattr(cfg, key)
        cap = share * cfg.epochs
        if value > cap:
            changes[key] = type(value)(round(cap)) if isinstance(value, int) else cap
    if changes:
        log.info("recipe scaled to a %d-epoch run: %s", cfg.epochs, ", ".join(
            f"{k} {getattr(cfg, k):g} -> {v:g} ({shares[k]:.0%} of the epochs)" for k, v in changes.items()))
    return replace(cfg, **changes) if changes else cfg


def _check_batchnorm_has_values(model: ModelHandle, batch: int, world: int, imgsz: int, source: str) -> None:
    """One image per device at ``imgsz == stride`` leaves the deepest BatchNorm one value per
    channel, which torch refuses in the first step; say so before any work, with the fix."""
    stride = model.spec.stride_for(model.task)
    if (batch // world) * (imgsz // stride) ** 2 >= 2:
        return
    if not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.net.modules()):
        return
    raise ConfigError(f"{source}: batch={batch} at imgsz={imgsz} gives each device one image, whose "
                      f"{stride}x-downsampled map is 1x1: BatchNorm then has one value per channel and cannot train; "
                      f"use batch >= {2 * world} or imgsz >= {2 * stride}")


def parse_train_devices(device: object, source: str, current: torch.device | None = None) -> libreyolo_ddp.DevicePlan:
    """``device=`` of training -> a plan this machine can run, checked before any data is read.
    Without one, the jobs' default-device policy picks (``devices.default_device``: the model's
    accelerator, else the best device here); the first log line names it.

    Raises:
        ConfigError: not a device value, or devices this machine lacks (CUDA, MPS, an index).
    """
    try:
        if device in (None, ""):
            chosen = default_device(None, current if current is not None else torch.device("cpu"))
            device = chosen.type if chosen.index is None else f"{chosen.type}:{chosen.index}"
        plan = libreyolo_ddp.parse_devices(device)  # type: ignore[arg-type]
        libreyolo_ddp.check_devices_available(plan)
    except libreyolo_ddp.DeviceError as err:
        raise ConfigError(f"{source}: {err}") from None
    return plan


def resolve_gains(model: ModelHandle, cfg: TrainConfig, source: str) -> dict[str, float]:
    """The family's gains with the user's overrides; a term the family lacks is an error."""
    decl = model.spec.task(model.task)
    gains = dict(decl.loss_gains)
    for name, value in cfg.requested_gains().items():
        if name not in decl.loss_gains:
            own = ", ".join(f"{k}={v:g}" for k, v in decl.loss_gains.items()) or "none"
            raise ConfigError(f"{source}: {model.spec.display_name} ({model.task}) has no loss term {name!r}; "
                              f"its gains are {own} (set them as keyword options or gains=name:value)")
        if value < 0:
            raise ConfigError(f"{source}: loss gain {name}={value:g} must be 0 or more")
        gains[name] = value
    return gains
