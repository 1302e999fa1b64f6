"""Fitting a model to a dataset before training: class count, names, and a seeded start."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from ..facade import LibreYOLO

log = logging.getLogger(__name__)


def adapt_to_classes(model: LibreYOLO, nc: int, names: Mapping[int, str]) -> None:
    """Give ``model`` the dataset's classes. A different class count rebuilds the network and keeps
    every weight whose shape still fits (all but the class outputs), so pretrained weights transfer."""
    model.names = dict(names)
    if model.nc == nc:
        return
    old_nc, before = model.nc, len(model.net.state_dict())
    model.rebuild(nc=nc, keep_weights=True)
    log.info("model adapted from %d to %d classes (%d state entries)", old_nc, nc, before)


def initialize_from_seed(model: LibreYOLO, seed: int) -> None:
    """Give a never-trained model (built from an architecture, not loaded) its random start from
    the training seed, so the same seed reproduces the same run on every path (one process,
    spawned workers, torchrun ranks). Loaded weights are never touched."""
    if model.checkpoint or model.ckpt_path is not None:
        return
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model.rebuild(keep_weights=False)
    log.info("untrained %s-%s: weights initialized from seed=%d", model.spec.display_name, model.size, seed)
