"""Resuming: the saved options win, except those a resumed run may change; every difference is reported."""

from __future__ import annotations

import logging
import typing
from collections.abc import Mapping
from typing import Any

import libreyolo_ddp

from ..config import coerce, suggest
from ..errors import ConfigError
from ..settings import device_text
from .settings import RESUME_MAY_CHANGE, TrainConfig

log = logging.getLogger(__name__)


def typed_options(given: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The given options converted as ``TrainConfig`` converts them, so ``batch="8"`` from the command
    line compares equal to the saved ``8``; an unknown option is an error here, with a suggestion."""
    hints = typing.get_type_hints(TrainConfig)
    for key in given:
        if key not in hints:
            raise ConfigError(f"{source}: unknown option {key!r}{suggest(key, hints)}")
    typed = {key: coerce(value, hints[key], key, source) for key, value in given.items()}
    if "device" in typed:
        typed["device"] = device_text(typed["device"])
    return typed


def merge_resume_options(ckpt: Mapping[str, Any], given: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The options of the resumed run.

    ``epochs`` may grow (the schedule is recomputed from the new total); ``device`` may change,
    in which case the global ``batch`` is kept and the per-rank batch recomputed (an error names
    valid values if it no longer divides). Any other changed option is reported and ignored.
    """
    saved = {k: v for k, v in dict(ckpt["config"]).items()}
    merged = dict(saved)
    for key, value in typed_options(given, source).items():
        if key == "resume" or saved.get(key) == value:
            continue
        if key in RESUME_MAY_CHANGE:
            log.info("resume: %s changed from %r to %r", key, saved.get(key), value)
            merged[key] = value
        else:
            log.warning("resume: %s=%r differs from the run's %r; a resumed run keeps its settings (start a new "
                        "run to change it)", key, value, saved.get(key))
    merged["resume"] = True
    done = int(ckpt["epoch"]) + 1
    if int(merged["epochs"]) <= done:
        raise ConfigError(f"{source}: the run already finished {done} of {saved['epochs']} epochs; pass a larger "
                          f"epochs= to extend it (e.g. epochs={done + 10})")
    saved_world, global_batch = int(ckpt.get("world_size", 1)), int(ckpt.get("global_batch", saved["batch"]))
    world = libreyolo_ddp.parse_devices(merged.get("device") or "auto").world_size
    if libreyolo_ddp.is_torchrun():
        world = libreyolo_ddp.dist_env().world_size
    merged["batch"] = global_batch
    if world != saved_world:
        per_rank = libreyolo_ddp.split_global_batch(global_batch, world, source=f"{source} (resume)")
        log.info("resume: %d device(s) now instead of %d; global batch stays %d (%d per device)",
                 world, saved_world, global_batch, per_rank)
    return merged
