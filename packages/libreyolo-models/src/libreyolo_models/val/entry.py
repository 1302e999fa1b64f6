"""``model.val(...)``: validate a model's current weights on a dataset split, with its task's metrics."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import libreyolo_ddp

from ..config import load_config
from ..devices import default_device, describe_device
from ..errors import ConfigError
from ..rundir import next_run_dir
from ..tasks import EvalSettings, TaskMetrics
from ..train.fit_options import OptionedTask
from ..workers import default_workers
from .settings import ValConfig

if TYPE_CHECKING:
    from ..handle import ModelHandle

log = logging.getLogger(__name__)


def validate_model(model: ModelHandle, options: Mapping[str, Any]) -> TaskMetrics:
    """The metrics of ``model``'s current weights on ``data``'s ``split`` (the facade keeps them)."""
    cfg = load_config(ValConfig, options, "val()")
    model.to(default_device(cfg.device, model.device, model.runs_only_on))
    log.info("val on %s", describe_device(model.device))
    if cfg.half and model.device.type != "cuda":
        raise ConfigError(f"val(half=True) runs fp16 weights, which needs a CUDA GPU; the model is on {model.device}. "
                          "Pass device=0 (or move the model with model.to(0)), or leave half=False on the CPU")
    imgsz = model.resolve_imgsz(cfg.imgsz)
    runtime = model.runtime
    if cfg.rect and runtime is not None and runtime.fixed_imgsz is not None:
        raise ConfigError(f"val(rect=True) feeds rectangles, and this exported model runs at {runtime.fixed_imgsz} x "
                          f"{runtime.fixed_imgsz} only; validate it with rect=False, or export with dynamic=True")
    # rect and single_cls as training reads them (train.fit_options)
    task = OptionedTask(model.task_spec, single_cls=cfg.single_cls, rect=cfg.rect, stride=model.stride)
    data = task.load_data(cfg.data)
    if cfg.single_cls and model.nc != 1 and not task.classes_from_data:
        raise ConfigError(f"val(single_cls=True) validates a model trained with single_cls=True (one class); this "
                          f"model predicts {model.nc} classes: validate it without single_cls")
    if data.nc != model.nc and not task.classes_from_data:
        raise ConfigError(f"data={cfg.data!r} has {data.nc} classes but the model predicts {model.nc}; "
                          "validate on the dataset the model was trained for"
                          + (" (single_cls=True if it trained with one class)" if model.nc == 1 else ""))
    data_keypoints = getattr(data, "keypoints", None)
    if isinstance(data_keypoints, int) and model.keypoints is not None and data_keypoints != model.keypoints:
        raise ConfigError(f"data={cfg.data!r} has {data_keypoints} keypoints per object but the model predicts "
                          f"{model.keypoints}; validate on the dataset the model was trained for")
    index = task.load_split(data, cfg.split)
    workers = default_workers(cfg.workers, batch=cfg.batch)
    pipeline = task.val_pipeline(index, imgsz=imgsz, batch_size=cfg.batch, device=model.device, workers=workers,
                                 cache=cfg.cache)
    if cfg.fuse:  # before the cast: BatchNorm folds from fp32 statistics, then rounds once
        model.fused_net()
    if cfg.half:
        model.half()
    model.net.eval()
    # Unfused by default (fuse=False): validation measures the exact network, as training's
    # validation of the EMA does; fuse=True runs the fused copy predict runs by default.
    net = model.inference_net(cfg.fuse)
    save_dir = None
    unwritten = [f"{name}=True" for name in ("plots", "save_json")
                 if getattr(cfg, name) and name not in task.val_artefacts]
    if unwritten:
        log.warning("%s: the %s task writes nothing for %s yet; the metrics are computed as usual",
                    " and ".join(unwritten), model.task, "it" if len(unwritten) == 1 else "them")
    if any(getattr(cfg, name) and name in task.val_artefacts for name in ("plots", "save_json")):
        save_dir = libreyolo_ddp.resolve_on_rank_zero(lambda: next_run_dir(cfg.project, cfg.name, exist_ok=cfg.exist_ok))
    settings = EvalSettings(conf=cfg.conf, iou=cfg.iou, max_det=cfg.max_det, half=cfg.half, save_dir=save_dir,
                            plots=cfg.plots, save_json=cfg.save_json)
    forward = model.inference_forward if net is model.net else (lambda x: model.inference_forward(x, net=net))
    result = task.evaluate(model, forward, pipeline, settings=settings, progress=cfg.verbose)
    if save_dir is not None:
        log.info("validation plots and files in %s", save_dir)
    if cfg.verbose:
        log.info("%s", result.table())
    return result
