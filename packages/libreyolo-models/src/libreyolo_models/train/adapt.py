"""Fitting a model to a dataset before training: class count, names, and a seeded start."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch

from ..data.errors import DataConfigError

if TYPE_CHECKING:
    from ..handle import ModelHandle

log = logging.getLogger(__name__)


def adapt_to_classes(model: ModelHandle, nc: int, names: Mapping[int, str], *,
                     keypoints: int | None = None) -> ModelHandle:
    """``model`` with the dataset's classes (and, for a pose dataset, its ``keypoints`` per
    instance): itself when they are already its own; the same network under the new names; or, for
    a different class or keypoint count, a rebuilt network keeping every weight whose shape still
    fits (all but the class and keypoint outputs), so pretrained weights transfer."""
    names = dict(names)
    new_keypoints = keypoints is not None and model.keypoints is not None and keypoints != model.keypoints
    if model.nc == nc and not new_keypoints:
        return model if model.names == names else model.renamed(names)
    adapted = model.rebuilt(nc=nc, names=names, keep_weights=True, keypoints=keypoints if new_keypoints else None)
    log.info("model adapted from %d to %d classes%s (%d state entries)", model.nc, nc,
             f", {model.keypoints} to {keypoints} keypoints" if new_keypoints else "", len(model.net.state_dict()))
    return adapted


def check_resume_classes(model: ModelHandle, nc: int, names: Mapping[int, str], data: str) -> None:
    """A resumed run continues one network, so its class count cannot change: one line saying
    what changed and the two ways on (new class names for the same count are taken as they are).

    Raises:
        DataConfigError: the dataset's class count is not the checkpoint's.
    """
    if nc == model.nc:
        return
    added = [str(v) for k, v in sorted(dict(names).items()) if k >= model.nc][:5]
    change = f"now has {nc} classes ({', '.join(added)}{'...' if nc - model.nc > 5 else ''} added)" if nc > model.nc \
        else f"now has {nc} classes ({model.nc - nc} fewer)"
    source = model.ckpt_path or "the checkpoint"
    raise DataConfigError(
        f"resume: data={data!r} {change} but the run trained {model.nc}; a resumed run continues the same "
        f"network, so its classes cannot change. Restore the dataset's {model.nc} classes to resume, or start a "
        f"new run from these weights without resume=True (LibreYOLO({str(source)!r}).train(data={data!r}, ...): "
        "the class outputs start afresh for the new classes)")


def initialize_from_seed(model: ModelHandle, seed: int) -> ModelHandle:
    """A never-trained model (built from an architecture, not loaded) with its random start drawn
    from the training seed, so the same seed reproduces the same run on every path (one process,
    spawned workers, torchrun ranks). A model with loaded weights comes back as it is."""
    if model.checkpoint or model.ckpt_path is not None:
        return model
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        seeded = model.rebuilt(keep_weights=False)
    log.info("untrained %s-%s: weights initialized from seed=%d", model.spec.display_name, model.size, seed)
    return seeded
