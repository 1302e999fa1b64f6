"""Trees of tensors (state dicts, optimizer states) moved to the host and packed for ``torch.save``.

A YOLOv9-t training checkpoint holds about 4,700 small tensors (weights, EMA weights, two Adam
moments and a step counter per parameter). Saved one by one, each costs ``torch.save`` some
20-80 us of Python (its pickler calls back into Python for every object and rebuilds every
tensor's storage record), which made writing ``last.pt`` a large share of a short epoch. The
entries only training reads back (``train_model``, ``optimizer``) are therefore stored packed,
one tensor per dtype, which ``torch.save`` writes about ten times faster (the whole checkpoint:
156 -> 74 ms on an H200 machine, ``tools/probe_checkpoint.py``). Weights that users and upstream
tools read (``model``) stay a plain state dict of separate tensors. Tensors reach the host as one
flat buffer per device and dtype (one transfer and one wait); that step costs about what copying
them one by one did, the per-tensor Python being the same.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

PACKED = "libreyolo_packed_tensors"
"""Key that marks a packed tree (and, inside it, each tensor's place)."""


def _is_tensor(node: Any) -> bool:
    return isinstance(node, Tensor)


def _is_place(node: Any) -> bool:
    return isinstance(node, dict) and len(node) == 1 and PACKED in node


def _map(tree: Any, leaf: Callable[[Any], Any], is_leaf: Callable[[Any], bool] = _is_tensor) -> Any:
    """``tree`` (dicts, lists, tuples, namedtuples, plain values) with each leaf ``x`` (a tensor,
    unless ``is_leaf`` says otherwise) replaced by ``leaf(x)``."""
    if is_leaf(tree):
        return leaf(tree)
    if isinstance(tree, dict):
        return {k: _map(v, leaf, is_leaf) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_map(v, leaf, is_leaf) for v in tree]
    if isinstance(tree, tuple):
        items = [_map(v, leaf, is_leaf) for v in tree]
        return type(tree)(*items) if hasattr(tree, "_fields") else tuple(items)
    return tree


def map_tensors(tree: Any, fn: Callable[[Tensor], Any]) -> Any:
    """``tree`` with every tensor ``t`` replaced by ``fn(t)`` (containers rebuilt, other leaves kept)."""
    return _map(tree, fn)


def _flat_on_host(tensors: list[Tensor]) -> tuple[dict[tuple[torch.device, torch.dtype], Tensor], list[int]]:
    """One flat CPU buffer per (device, dtype) of ``tensors`` in the standard layout, and each
    tensor's offset in its buffer. One concatenation and one copy per group, whatever the count."""
    groups: dict[tuple[torch.device, torch.dtype], list[int]] = {}
    for i, t in enumerate(tensors):
        groups.setdefault((t.device, t.dtype), []).append(i)
    offsets = [0] * len(tensors)
    flats: dict[tuple[torch.device, torch.dtype], Tensor] = {}
    with torch.no_grad():
        for key, members in groups.items():
            at = 0
            for i in members:
                offsets[i] = at
                at += tensors[i].numel()
            # reshape(-1) reads in logical (NCHW) order: a channels_last weight comes out standard.
            flat = torch.cat([tensors[i].reshape(-1) for i in members])
            flats[key] = flat.to("cpu") if flat.device.type != "cpu" else flat
    return flats, offsets


def tensor_leaves(tree: Any) -> list[Tensor]:
    """Every tensor of ``tree`` (dicts, lists, tuples), depth first."""
    found: list[Tensor] = []
    _map(tree, found.append)
    return found


def host_copies(tree: Any) -> Any:
    """``tree`` with every tensor replaced by a detached CPU copy of its own, in the standard
    memory layout. Later changes to the originals (training goes on) never reach the copies."""
    tensors = tensor_leaves(tree)
    flats, offsets = _flat_on_host(tensors)
    order = iter(range(len(tensors)))

    def copy(t: Tensor) -> Tensor:
        i = next(order)
        flat = flats[(t.device, t.dtype)]
        return flat[offsets[i]:offsets[i] + t.numel()].view(t.shape).clone()

    return _map(tree, copy)


def pack_tensors(tree: Any) -> dict[str, Any]:
    """``tree`` as a packed record: its structure with each tensor replaced by a small place marker,
    and the values in one flat CPU tensor per dtype. ``unpack_tensors`` reverses it exactly
    (values, dtypes and shapes; the layout comes back standard). Loads with ``weights_only=True``."""
    tensors = tensor_leaves(tree)
    flats, offsets = _flat_on_host(tensors)
    data: dict[str, Tensor] = {}
    bases: dict[tuple[torch.device, torch.dtype], int] = {}  # where each group starts in its dtype's buffer
    for key, flat in flats.items():  # groups of one dtype from several devices merge on the host
        name = str(key[1]).removeprefix("torch.")
        bases[key] = data[name].numel() if name in data else 0
        data[name] = torch.cat((data[name], flat)) if name in data else flat
    order = iter(range(len(tensors)))

    def place(t: Tensor) -> dict[str, Any]:
        i = next(order)
        name = str(t.dtype).removeprefix("torch.")
        return {PACKED: (name, bases[(t.device, t.dtype)] + offsets[i], tuple(t.shape))}

    return {PACKED: 1, "tree": _map(tree, place), "data": data}


def is_packed(obj: Any) -> bool:
    return isinstance(obj, dict) and obj.get(PACKED) == 1 and "tree" in obj and "data" in obj


def unpack_tensors(obj: Any) -> Any:
    """The tree ``pack_tensors`` packed, each tensor a CPU tensor of its own; anything not packed
    (a checkpoint written before packing) is returned as it is."""
    if not is_packed(obj):
        return obj
    data: dict[str, Tensor] = obj["data"]

    def restore(place: dict[str, Any]) -> Tensor:
        name, offset, shape = place[PACKED]
        return data[name][offset:offset + math.prod(shape)].view(tuple(shape)).clone()

    return _map(obj["tree"], restore, is_leaf=_is_place)
