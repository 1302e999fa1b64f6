"""The predict loop: sources -> the task's preprocessing -> network (eager or graphed) -> the
family's post-processing -> the task's ``Results``."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..errors import ConfigError
from ..graphs import forward_for_predict
from ..rundir import next_run_dir
from ..settings import PredictConfig
from .results import ResultsList
from .sources import SourceImage, SourceReport, iter_sources

if TYPE_CHECKING:
    from ..facade import LibreYOLO

log = logging.getLogger(__name__)


def _chunks(items: Iterable[SourceImage], size: int) -> Iterator[list[SourceImage]]:
    it = iter(items)
    while chunk := list(islice(it, size)):
        yield chunk


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_prediction(model: LibreYOLO, source: object, cfg: PredictConfig) -> ResultsList:
    """Predict every readable image of ``source``; batches of ``cfg.batch`` share one forward pass.

    Unreadable items of a folder, glob, list or stream are skipped (see ``sources``) and listed
    on the returned list's ``skipped``.
    """
    if cfg.device is not None:
        model.to(cfg.device)
    if cfg.half:
        model.half()
    if cfg.fuse:
        model.fuse()
    imgsz = model.spec.check_imgsz(cfg.imgsz or model.imgsz)
    task = model.task_spec
    options = task.postprocess_options(vars(cfg))
    if cfg.classes is not None:
        bad = [c for c in cfg.classes if not 0 <= c < model.nc]
        if bad:
            raise ConfigError(f"classes={cfg.classes}: class id {bad[0]} is not one of this model's "
                              f"{model.nc} classes (0..{model.nc - 1})")
    model.net.eval()
    forward = forward_for_predict(model, cfg.cuda_graph)
    save_dir = next_run_dir(cfg.project, cfg.name) if cfg.save else None
    device, dtype = model.device, model.dtype
    results = ResultsList()
    report = SourceReport()
    saved_names: set[str] = set()
    for chunk in _chunks(iter_sources(source, report), cfg.batch):
        t0 = time.perf_counter()
        prepared = [task.prepare(item.image, imgsz) for item in chunk]
        x = torch.stack([p.tensor for p in prepared]).to(device=device, dtype=dtype, non_blocking=True)
        _sync(device)
        t1 = time.perf_counter()
        with torch.inference_mode():
            out = forward(x)
        _sync(device)
        t2 = time.perf_counter()
        predictions = model.family.postprocess(out, options)
        t3 = time.perf_counter()
        n = len(chunk)
        speed = {"preprocess": (t1 - t0) * 1e3 / n, "inference": (t2 - t1) * 1e3 / n,
                 "postprocess": (t3 - t2) * 1e3 / n}
        for item, prediction, prep in zip(chunk, predictions, prepared):
            res = task.make_results(item.image, item.name, dict(model.names), prediction, prep.info, dict(speed))
            if save_dir is not None:
                res.save(save_dir / _unique_name(Path(item.name).stem, saved_names))
            if cfg.verbose:
                log.info("%s: %s (%.1f ms)", item.name, res.summary(), speed["inference"])
            results.append(res)
    results.skipped = report.skipped
    if save_dir is not None:
        log.info("predictions saved to %s", save_dir)
    if report.skipped:
        log.warning("%d input(s) skipped as unreadable (each named above); results for the rest",
                    len(report.skipped))
    return results


def _unique_name(stem: str, used: set[str]) -> str:
    """``stem.jpg``, or ``stem_2.jpg``, ``stem_3.jpg``... when inputs share a name (no overwrites)."""
    name, n = f"{stem}.jpg", 1
    while name in used:
        n += 1
        name = f"{stem}_{n}.jpg"
    used.add(name)
    return name
