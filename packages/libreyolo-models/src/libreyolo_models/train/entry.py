"""``model.train(...)``: options, resume, and where the training runs (this process, spawned
workers for ``device="0,1"``, or the processes torchrun started).

The caller's model ends holding the best weights in every case.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import libreyolo_ddp

from ..config import load_config
from ..errors import ConfigError
from .adapt import initialize_from_seed
from .checkpoints import is_training_checkpoint
from .resume import merge_resume_options
from .settings import TrainConfig
from .trainer import Trainer, TrainOutcome

if TYPE_CHECKING:
    from ..model import LibreYOLO

log = logging.getLogger(__name__)


def train_model(model: LibreYOLO, options: Mapping[str, Any]) -> TrainOutcome:
    options = dict(options)
    callbacks = options.pop("callbacks", None)
    source = f"{type(model).__name__}.train()"
    model.require_unfused("train")
    resume = None
    if options.get("resume"):
        if not is_training_checkpoint(model.checkpoint):
            raise ConfigError(f"{source}: resume=True needs a model loaded from a training checkpoint, e.g. "
                              "LibreYOLO('runs/train/exp/weights/last.pt').train(resume=True); "
                              f"this model came from {model.ckpt_path or 'an architecture spec'}")
        resume = model.checkpoint
        options = merge_resume_options(resume, options, source)
    cfg = load_config(TrainConfig, options, source)
    initialize_from_seed(model, cfg.seed)
    plan = libreyolo_ddp.parse_devices(cfg.device or "auto")
    if libreyolo_ddp.is_torchrun():
        outcome = _train_under_torchrun(model, cfg, callbacks, resume)
    elif plan.is_distributed:
        outcome = _train_spawned(model, cfg, plan, callbacks, resume)
    else:
        if cfg.batch == -1:
            cfg = _with_autobatch(model, cfg, plan, world_size=1)
        outcome = Trainer(model, cfg, callbacks=callbacks, resume=resume).run()
    _load_best(model, outcome)
    return outcome


def _load_best(model: LibreYOLO, outcome: TrainOutcome) -> None:
    """Put the best (EMA) weights into the caller's instance, on the device it was on."""
    best = outcome.best or outcome.last
    if best is None or not Path(best).is_file():
        return
    device = model.device
    model.load(best)
    model.to(device)
    log.info("model now holds the best weights: %s", best)


def _with_autobatch(model: LibreYOLO, cfg: TrainConfig, plan: libreyolo_ddp.DevicePlan, *, world_size: int) -> TrainConfig:
    from dataclasses import replace

    from .autobatch import probe_training_batch

    if plan.type != "cuda":
        raise ConfigError("batch=-1 (fit the batch to GPU memory) needs a CUDA device; on "
                          f"{plan.type} pass a fixed batch, e.g. batch=16")
    imgsz = cfg.imgsz or model.imgsz
    batch = libreyolo_ddp.resolve_autobatch(lambda: probe_training_batch(model, imgsz, plan.torch_device(0), cfg.amp),
                                            world_size=world_size, nbs=cfg.nbs)
    return replace(cfg, batch=batch)


def _train_under_torchrun(model: LibreYOLO, cfg: TrainConfig, callbacks: list | None,
                          resume: dict[str, Any] | None) -> TrainOutcome:
    plan = libreyolo_ddp.parse_devices(cfg.device or "auto")
    env = libreyolo_ddp.init_distributed(libreyolo_ddp.choose_backend(plan.type))
    libreyolo_ddp.configure_rank_logging(env.rank)
    if cfg.batch == -1:
        cfg = _with_autobatch(model, cfg, libreyolo_ddp.parse_devices(f"{env.local_rank}"), world_size=env.world_size)
    outcome = Trainer(model, cfg, callbacks=callbacks, resume=resume).run()
    libreyolo_ddp.barrier()  # rank 0 has written best.pt before anyone reads it
    return outcome


def _train_spawned(model: LibreYOLO, cfg: TrainConfig, plan: libreyolo_ddp.DevicePlan, callbacks: list | None,
                   resume: dict[str, Any] | None) -> TrainOutcome:
    libreyolo_ddp.ensure_not_spawned_child()
    spec = model.spec
    if not spec.ddp_autospawn:
        raise ConfigError(
            f"{spec.display_name} does not support device={cfg.device!r} from model.train() (auto-spawn is not "
            f"verified for this family). Run the same script under torchrun instead: "
            f"torchrun --nproc_per_node={plan.world_size} your_script.py")
    if cfg.batch == -1:
        cfg = _with_autobatch(model, cfg, plan, world_size=plan.world_size)
    libreyolo_ddp.split_global_batch(cfg.batch, plan.world_size)  # fail before any expensive work
    fd, weights = tempfile.mkstemp(prefix="libreyolo-ddp-", suffix=".pt")
    os.close(fd)
    try:
        if resume is not None:
            from ..checkpoint import atomic_save

            atomic_save(resume, weights)
        else:
            model.save(weights)
        return libreyolo_ddp.spawn(_worker, (weights, cfg, callbacks, resume is not None), devices=plan,
                                   arg_names=("weights", "config", "callbacks", "resume"))
    finally:
        Path(weights).unlink(missing_ok=True)


def _worker(weights: str, cfg: TrainConfig, callbacks: list | None, resume: bool) -> TrainOutcome:
    """One spawned rank: rebuild the model from the parent's weights and train as usual."""
    from ..model import LibreYOLO

    libreyolo_ddp.configure_rank_logging()
    model = LibreYOLO(weights)
    return Trainer(model, cfg, callbacks=callbacks, resume=model.checkpoint if resume else None).run()
