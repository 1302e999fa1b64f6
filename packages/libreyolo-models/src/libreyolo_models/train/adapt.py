"""Fitting a model to a dataset before training: class count and names."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from ..model import LibreYOLO

log = logging.getLogger(__name__)


def adapt_to_classes(model: LibreYOLO, nc: int, names: Mapping[int, str]) -> None:
    """Give ``model`` the dataset's classes. A different class count rebuilds the network and keeps
    every weight whose shape still fits (all but the class outputs), so pretrained weights transfer."""
    model.names = dict(names)
    if model.nc == nc:
        return
    old_state, device = model.net.state_dict(), model.device
    old_nc = model.nc
    model.invalidate_cuda_graph(f"class count changed {old_nc} -> {nc}")
    model.nc = nc
    model.net = model.build_net(model.size, nc).to(device)
    new_state = model.net.state_dict()
    kept = {k: v for k, v in old_state.items() if k in new_state and new_state[k].shape == v.shape}
    model.net.load_state_dict(kept, strict=False)
    if model._graphs is not None:
        model._graphs.release()
        model._graphs = None
    log.info("model adapted from %d to %d classes: %d/%d weights transferred", old_nc, nc, len(kept), len(new_state))


def initialize_from_seed(model: LibreYOLO, seed: int) -> None:
    """Give a never-trained model (built from an architecture, not loaded) its random start from
    the training seed, so the same seed reproduces the same run on every path (one process,
    spawned workers, torchrun ranks). Loaded weights are never touched."""
    if model.checkpoint or model.ckpt_path is not None:
        return
    device = model.device
    model.invalidate_cuda_graph("weights re-initialized from the training seed")
    if model._graphs is not None:
        model._graphs.release()
        model._graphs = None
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model.net = model.build_net(model.size, model.nc).to(device)
    log.info("untrained %s-%s: weights initialized from seed=%d", model.spec.display_name, model.size, seed)
