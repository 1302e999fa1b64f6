"""``model.val(...)``: validate a model's current weights on a dataset split."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..config import load_config
from ..data.datasets import load_split, resolve_dataset
from ..data.pipeline import ValPipeline
from ..errors import ConfigError
from ..settings import check_imgsz
from ..workers import default_workers
from .metrics import MetricsResult
from .settings import ValConfig
from .validator import evaluate

if TYPE_CHECKING:
    from ..model import LibreYOLO

log = logging.getLogger(__name__)


def validate_model(model: LibreYOLO, options: Mapping[str, Any]) -> MetricsResult:
    cfg = load_config(ValConfig, options, f"{type(model).__name__}.val()")
    if cfg.device is not None:
        model.to(cfg.device)
    data = resolve_dataset(cfg.data)
    if data.nc != model.nc:
        raise ConfigError(f"data={cfg.data!r} has {data.nc} classes but the model predicts {model.nc}; "
                          "validate on the dataset the model was trained for")
    index = load_split(data, cfg.split)
    imgsz = check_imgsz(cfg.imgsz or model.imgsz)
    workers = default_workers(cfg.workers, batch=cfg.batch)
    pipeline = ValPipeline(index, imgsz=imgsz, batch_size=cfg.batch, device=model.device, workers=workers,
                           cache=cfg.cache)
    if cfg.half:
        model.half()
    if cfg.fuse:
        model.fuse()
    model.net.eval()
    result = evaluate(model, model.forward_tensors, pipeline, conf=cfg.conf, iou=cfg.iou, max_det=cfg.max_det,
                      progress=cfg.verbose)
    model.metrics = result
    if cfg.verbose:
        log.info("%s", result.table())
    return result
