"""``train(pretrained=path)``: start from weights the user already has, with fresh class outputs.

The file is read safely (``weights_only=True``): a bare state dict (``torch.save(model.state_dict())``
of a torchvision model), a dict holding one under ``model``/``state_dict``, or a LibreYOLO
checkpoint. The family maps legacy key names (``remap_state``) and names its class outputs
(``Family.head_prefixes``), which are never loaded: the dataset's classes are not the file's.
Every other tensor of the network must be in the file with its shape, or nothing is loaded and
the error lists what did not fit.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..checkpoint import extract_state_dict, load_checkpoint
from ..errors import CheckpointError

if TYPE_CHECKING:
    from ..handle import ModelHandle

log = logging.getLogger(__name__)


def load_pretrained(model: ModelHandle, path: str | Path, source: str = "train(pretrained=...)") -> int:
    """Copy every tensor of ``path`` outside the class outputs into ``model``; returns how many.

    Raises:
        CheckpointError: the file is unreadable, or the weights do not fit the architecture
            (missing, unexpected or misshapen keys, named).
    """
    ckpt = load_checkpoint(path)
    state = model.family.remap_state(extract_state_dict(ckpt, str(path)))
    skip = model.family.head_prefixes()
    own = {k: v for k, v in model.net.state_dict().items() if not k.startswith(skip)}
    theirs = {k: v for k, v in state.items() if not k.startswith(skip)}
    missing = [k for k in own if k not in theirs]
    unexpected = [k for k in theirs if k not in own]
    wrong = [f"{k} {tuple(theirs[k].shape)} vs {tuple(v.shape)}" for k, v in own.items()
             if k in theirs and theirs[k].shape != v.shape]
    if missing or unexpected or wrong:
        name = model.spec.weight_name(model.size, model.task, "")
        raise CheckpointError(
            f"{source}: {path} does not fit {name} ({model.spec.display_name}-{model.size}): {len(missing)} "
            f"missing keys (e.g. {missing[:3]}), {len(unexpected)} unexpected (e.g. {unexpected[:3]}), "
            f"{len(wrong)} of another shape (e.g. {wrong[:2]}). Pass the state dict of the same architecture "
            f"and size (for torchvision models: torch.save(model.state_dict(), path)).")
    with torch.no_grad():
        model.net.load_state_dict(theirs, strict=False)
    model.graphs.invalidate(f"pretrained weights loaded from {path}")
    log.info("pretrained: %d tensors from %s; class outputs (%s) start fresh", len(theirs), path,
             ", ".join(p.rstrip(".") for p in skip) or "none")
    return len(theirs)
