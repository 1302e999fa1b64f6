"""Helpers for the upstream-compatibility tests of every family: manifests and deterministic fills.

The rules are restated from the shared data's notes (``data/upstream/SOURCE.md``): each state-dict
entry ``i`` (natural order, every entry counted, aliases and integers too) gets a deterministic
base sequence (``sine`` or ``hash``), transformed by the kind of entry. Import as
``from upstream_fill import fill_weights, read_manifest`` (the tests folder is on ``sys.path``).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from torch import nn

DATA = Path(__file__).parent / "data" / "upstream"
GAINS = {"sine": 1.0, "hash": 2.75}
MASK32 = np.uint64(0xFFFFFFFF)
MUL = np.uint64(0x45D9F3B)
_BATCH_NORMS = {"BatchNorm1d", "BatchNorm2d", "SyncBatchNorm", "FrozenBatchNorm2d"}
_NORMS = _BATCH_NORMS | {"LayerNorm", "GroupNorm"}


def read_manifest(name: str) -> tuple[dict[str, int], list[tuple[str, str, str]]]:
    """``manifest-<name>.tsv`` -> (header numbers, rows of (key, shape, dtype))."""
    lines = (DATA / f"manifest-{name}.tsv").read_text().splitlines()
    header = dict(tok.split("=") for tok in lines[0].split() if "=" in tok)
    rows = [tuple(line.split("\t")) for line in lines[1:]]
    return {k: int(v) for k, v in header.items() if v.isdigit()}, rows  # type: ignore[misc]


def layout_rows(model: nn.Module) -> list[tuple[str, str, str]]:
    """The model's state dict as manifest rows."""
    return [(k, "x".join(map(str, v.shape)) if v.dim() else "scalar", str(v.dtype).removeprefix("torch."))
            for k, v in model.state_dict().items()]


def mix32(h: np.ndarray) -> np.ndarray:
    h = h.astype(np.uint64)
    h ^= h >> np.uint64(16)
    h = (h * MUL) & MASK32
    h ^= h >> np.uint64(16)
    h = (h * MUL) & MASK32
    h ^= h >> np.uint64(16)
    return h


def base_sequence(variant: str, index: int, numel: int) -> np.ndarray:
    """The float32 base values of entry ``index``."""
    if variant == "sine":
        k = np.arange(numel, dtype=np.float64)
        return np.sin(k * 0.37 + index).astype(np.float32)
    seed = mix32(np.array([index + 1], dtype=np.uint64))[0]
    k = np.arange(numel, dtype=np.uint64)
    h = mix32((k + seed) & MASK32)
    return (h.astype(np.float64) / 2.0**31 - 1.0).astype(np.float32)


def fill_weights(model: nn.Module, variant: str = "hash") -> None:
    """Overwrite every state-dict entry with upstream's deterministic weights (in place).

    Aliased entries (one tensor under several keys) keep the first key's values.
    """
    state = model.state_dict(keep_vars=True)
    seen: dict[int, torch.Tensor] = {}
    filled: dict[str, torch.Tensor] = {}
    for i, (key, value) in enumerate(state.items()):
        value = value.detach()
        ptr = value.data_ptr() if value.numel() else -1 - i
        if ptr in seen:
            filled[key] = seen[ptr]
            continue
        if not value.is_floating_point():
            filled[key] = value.clone()
            continue
        owner = type(model.get_submodule(key.rsplit(".", 1)[0])).__name__ if "." in key else ""
        s = base_sequence(variant, i, value.numel())
        leaf = key.rsplit(".", 1)[-1]
        if owner in _BATCH_NORMS and leaf == "running_var":
            out = np.float32(1) + np.float32(0.5) * np.abs(s)
        elif owner in _NORMS and leaf == "weight":
            out = np.float32(1) + np.float32(0.1) * s
        elif value.dim() >= 2:
            fan_in = value.numel() / value.shape[0]
            out = s * np.float32(GAINS[variant] / math.sqrt(fan_in))
        else:
            out = s * np.float32(0.1)
        tensor = torch.from_numpy(out.reshape(tuple(value.shape)))
        filled[key] = seen[ptr] = tensor
    model.load_state_dict(filled)


def vector_input(size: int = 320) -> torch.Tensor:
    """The shared vectors' input: ``0.5 + 0.5 sin(0.05 h + 0.03 w + 1.3 c)``, batch 1, float32."""
    c, h, w = np.meshgrid(np.arange(3), np.arange(size), np.arange(size), indexing="ij")
    x = 0.5 + 0.5 * np.sin(0.05 * h + 0.03 * w + 1.3 * c)
    return torch.from_numpy(x.astype(np.float32))[None]
