"""Checkpoint files: safe loading, atomic writing, the upstream-compatible schema.

A checkpoint is a flat dict (``torch.save``) with the network's state dict under ``model`` plus
metadata: the schema upstream LibreYOLO writes (``schema_version`` "1.0", ``model_family``,
``size``, ``task``, ``nc``, ``names``, ``imgsz``...). Training checkpoints add optimizer, EMA and
epoch state. Files are loaded with ``weights_only=True`` only: a checkpoint can never run code.
"""

from __future__ import annotations

import logging
import os
import pickle
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from .errors import CheckpointError

log = logging.getLogger(__name__)

SCHEMA_VERSION = "1.0"


def atomic_save(obj: object, path: str | Path) -> Path:
    """Write ``obj`` with ``torch.save`` to ``path`` atomically (temp file, fsync, rename).

    A crash mid-write leaves the previous file intact: readers see the old or the new file,
    never half of one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(obj, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    return path


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # some filesystems do not allow opening a directory
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def cpu_state_dict(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Detached CPU copies of a module's state, in the standard (NCHW) layout whatever the
    training layout was, so a checkpoint reads the same everywhere."""
    return {k: v.detach().cpu().clone(memory_format=torch.contiguous_format) for k, v in module.state_dict().items()}


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint file safely (``weights_only=True``) into a dict.

    Raises:
        CheckpointError: the file is missing, unreadable, not a checkpoint, or holds pickled
            objects that would need code execution to load (refused, never executed).
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist or is not a file")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise CheckpointError(
            f"refusing to load {str(path)!r}: it contains pickled Python objects that would run code "
            f"when loaded (torch.load(weights_only=True) rejected it: {str(err).splitlines()[0]}). "
            "LibreYOLO only loads tensors and plain data. If you trust the file, re-save it from the "
            "program that made it as a plain dict of tensors, e.g. "
            "torch.save({'model': net.state_dict()}, 'clean.pt').") from None
    except (RuntimeError, OSError, EOFError, ValueError) as err:
        raise CheckpointError(f"cannot read checkpoint {str(path)!r}: {err}. Is it a complete torch.save file? "
                              "A download or copy may have been cut short.") from err
    if isinstance(obj, Mapping):
        return dict(obj)
    raise CheckpointError(f"{str(path)!r} holds a {type(obj).__name__}, not a checkpoint dict or state dict")


def extract_state_dict(ckpt: Mapping[str, Any], source: str) -> dict[str, torch.Tensor]:
    """The network weights in a checkpoint: ``model``, else ``state_dict``, else the dict itself.

    Strips a DDP ``module.`` prefix; a family maps its own legacy key names (``remap_state``).
    """
    state = ckpt.get("model", ckpt.get("state_dict", ckpt))
    if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{source}: no state dict found (expected a 'model' entry of tensors)")
    return {key.removeprefix("module."): value for key, value in state.items()}


def checkpoint_metadata(*, family: str, size: str, task: str, nc: int, names: Mapping[int, str],
                        imgsz: int, version: str) -> dict[str, Any]:
    """The upstream schema's required metadata (everything but ``model``)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "libreyolo_version": version,
        "model_family": family,
        "size": size,
        "task": task,
        "nc": int(nc),
        "names": {int(k): str(v) for k, v in names.items()},
        "imgsz": int(imgsz),
    }
