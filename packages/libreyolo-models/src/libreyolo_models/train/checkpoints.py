"""Training checkpoints: ``last.pt`` every epoch, ``best.pt`` on improvement, both atomic.

They extend the upstream schema (``model`` holds the EMA weights, ``train_model`` the raw ones)
with what resuming needs: optimizer, scaler, EMA updates, epoch, best fitness, the config, and the
world size and global batch the run used. ``model`` and ``ema`` are plain state dicts; the entries
only a resume reads (``train_model``, ``optimizer``) are packed (``tensor_trees.pack_tensors``: one
tensor per dtype, which ``torch.save`` writes several times faster than thousands of small ones);
a resume reads packed and older unpacked checkpoints alike. Each also carries the run's numerics
certificate (``certificate.py``): environment, whether the steps ran graphed, the certified class.

``best.pt`` holds the deployable part only (``best_weights``): the EMA weights with the metadata,
record and certificate, without the raw weights and optimizer state that only a resume reads,
which are three quarters of the file under Adam. ``last.pt`` and ``epoch{N}.pt`` keep everything.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..certificate import (
    CERTIFICATE_KEY,
    UNMEASURED,
    Certificate,
    current_environment,
    find_certified,
    probe_hashes,
    today,
    training_precision,
)
from ..checkpoint import atomic_save, atomic_save_bytes, cpu_state_dict, serialized
from ..tensor_trees import pack_tensors
from .fused_optim import AnyOptimizer

if TYPE_CHECKING:
    from ..handle import ModelHandle
    from .ema import ModelEMA

log = logging.getLogger(__name__)


def build_training_checkpoint(model: ModelHandle, *, net: torch.nn.Module, ema: ModelEMA | None,
                              optimizer: AnyOptimizer, scaler: torch.amp.GradScaler | None, epoch: int,
                              best: dict[str, Any], config: dict[str, Any], world_size: int,
                              global_batch: int, run_dir: Path, loss: float, imgsz: int) -> dict[str, Any]:
    """Everything to continue after ``epoch`` (0-based, completed); ``imgsz``: the size trained at,
    which the checkpoint records as the model's."""
    # The weights users read (model, ema) stay plain state dicts; what only a resume reads back
    # (raw weights, optimizer state) is packed: tensor_trees says why.
    smoothed = cpu_state_dict(ema.ema) if ema is not None else None  # one copy, saved once, under two keys
    ckpt = model.state_for_checkpoint(smoothed if smoothed is not None else cpu_state_dict(net), imgsz=imgsz)
    ckpt.update({
        "is_ema_weights": ema is not None,
        "train_model": pack_tensors(net.state_dict()),
        "ema": smoothed,
        "ema_updates": ema.updates if ema is not None else 0,
        "optimizer": pack_tensors(optimizer.state_dict()),
        "scaler": scaler.state_dict() if scaler is not None and scaler.is_enabled() else None,
        "epoch": epoch,
        "config": {k: (v if isinstance(v, str | int | float | bool | type(None)) else str(v)) for k, v in config.items()},
        "loss": float(loss),
        "best_fitness": best.get("fitness", 0.0),
        "best_epoch": best.get("epoch", -1),
        **{f"best_{k}": v for k, v in best.get("fields", {}).items()},
        "best_metric_key": "fitness",
        "best_metric_value": best.get("fitness", 0.0),
        "best_metric_name": model.task_spec.fitness_name,
        "world_size": world_size,
        "global_batch": global_batch,
        "run_dir": str(run_dir),
        CERTIFICATE_KEY: run_certificate(model, ema.ema if ema is not None else net, amp=bool(config.get("amp")),
                                         global_batch=global_batch, imgsz=imgsz).to_dict(),
    })
    return ckpt


def run_certificate(model: ModelHandle, net: torch.nn.Module, *, amp: bool, global_batch: int,
                    imgsz: int) -> Certificate:
    """The record of this run for its checkpoints: this environment; ``graphed`` when the training
    capture is replaying graphs now (none latched, some replayed since the last invalidation); the
    class the shipped table certifies for this configuration (``unmeasured`` without a row); and
    the hashes of ``net``'s (the saved weights') outputs on the parity probes, in eval mode."""
    device = next(net.parameters()).device
    dtype = training_precision(amp, device)
    helper = model.graphs.training
    graphed = False
    if helper is not None:
        info = helper.info()
        graphed = info.replays > 0 and info.latched is None
    certified = find_certified(model.spec.name, model.size, model.task, dtype, device.type)
    was_training = net.training
    net.eval()
    try:
        hashes = probe_hashes(lambda x: model.inference_forward(x, net=net), imgsz, device=device)
    finally:
        net.train(was_training)
    return Certificate(family=model.spec.name, size=model.size, task=model.task, dtype=dtype, batch=global_batch,
                       device=device.type, **current_environment(device),
                       numerics_class=certified.numerics_class if certified is not None else UNMEASURED,
                       graphed=graphed, probe_hashes=hashes, date=today(), source="train")


RESUME_ONLY_KEYS = ("train_model", "ema", "ema_updates", "optimizer", "optimizer_choice", "scaler")


def best_weights(ckpt: Mapping[str, Any]) -> dict[str, Any]:
    """What ``best.pt`` keeps of a training checkpoint: everything but what only a resume reads."""
    return {k: v for k, v in ckpt.items() if k not in RESUME_ONLY_KEYS}


def write_epoch_checkpoints(ckpt: dict[str, Any], weights_dir: Path, *, is_best: bool, epoch: int,
                            save_period: int) -> tuple[Path, Path | None]:
    """``last.pt`` always, ``epoch{N}.pt`` every ``save_period`` epochs (one serialization for
    both), ``best.pt`` (``best_weights``) when improved."""
    data = serialized(ckpt)
    last = atomic_save_bytes(data, weights_dir / "last.pt")
    best = atomic_save(best_weights(ckpt), weights_dir / "best.pt") if is_best else None
    if save_period > 0 and (epoch + 1) % save_period == 0:
        atomic_save_bytes(data, weights_dir / f"epoch{epoch + 1}.pt")
    return last, best


def is_training_checkpoint(ckpt: Mapping[str, Any]) -> bool:
    return "optimizer" in ckpt and "epoch" in ckpt and "config" in ckpt
