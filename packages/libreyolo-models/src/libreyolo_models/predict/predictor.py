"""The predict loop: sources -> letterbox -> network (eager or graphed) -> NMS -> ``Results``."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..layers.nms import scale_to_original
from ..rundir import next_run_dir
from ..settings import PredictConfig, check_imgsz
from .letterbox import letterbox
from .results import Boxes, Results
from .sources import SourceImage, iter_sources

if TYPE_CHECKING:
    from ..model import LibreYOLO

log = logging.getLogger(__name__)


def _chunks(items: Iterable[SourceImage], size: int) -> Iterator[list[SourceImage]]:
    it = iter(items)
    while chunk := list(islice(it, size)):
        yield chunk


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_prediction(model: LibreYOLO, source: object, cfg: PredictConfig) -> list[Results]:
    """Predict every image of ``source``; batches of ``cfg.batch`` share one forward pass."""
    from ..graphs import forward_for_predict

    if cfg.device is not None:
        model.to(cfg.device)
    if cfg.half:
        model.half()
    if cfg.fuse:
        model.fuse()
    imgsz = check_imgsz(cfg.imgsz or model.imgsz)
    model.net.eval()
    forward = forward_for_predict(model, cfg.cuda_graph)
    save_dir = next_run_dir(cfg.project, cfg.name) if cfg.save else None
    device, dtype = model.device, model.dtype
    results: list[Results] = []
    for chunk in _chunks(iter_sources(source), cfg.batch):
        t0 = time.perf_counter()
        boxed = [letterbox(item.image, imgsz) for item in chunk]
        x = torch.stack([t for t, _ in boxed]).to(device=device, dtype=dtype, non_blocking=True)
        _sync(device)
        t1 = time.perf_counter()
        with torch.inference_mode():
            out = forward(x)
        _sync(device)
        t2 = time.perf_counter()
        dets = model.postprocess(out, conf=cfg.conf, iou=cfg.iou, max_det=cfg.max_det, classes=cfg.classes)
        dets = [scale_to_original(d, info.ratio, info.pad, info.orig_shape).cpu() for d, (_, info) in zip(dets, boxed)]
        t3 = time.perf_counter()
        n = len(chunk)
        speed = {"preprocess": (t1 - t0) * 1e3 / n, "inference": (t2 - t1) * 1e3 / n,
                 "postprocess": (t3 - t2) * 1e3 / n}
        for item, det in zip(chunk, dets):
            res = Results(item.image, item.name, dict(model.names), Boxes(det, item.image.shape[:2]), dict(speed))
            if save_dir is not None:
                res.save(save_dir / (Path(item.name).stem + ".jpg"))
            if cfg.verbose:
                log.info("%s: %s (%.1f ms)", item.name, res.summary(), speed["inference"])
            results.append(res)
    if save_dir is not None:
        log.info("predictions saved to %s", save_dir)
    return results
