"""Flatten nested outputs (tuples, lists, dicts of tensors) into leaves and back.

A graph hands back flat static buffers; callers expect the structure their callable returned.
Non-tensor leaves (``None``, ints, strings) are constants of the structure: a graph reproduces
them as they were at capture. Paths name leaves the way a user indexes them (``out['boxes']``,
``out[0][1]``), so parity reports can say which output failed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from torch import Tensor


@dataclass(frozen=True)
class TreeSpec:
    """Shape of a nested output: the container kinds, their keys and any constant leaves.

    ``kind`` is ``"tensor"`` for a tensor leaf, ``"const"`` for a non-tensor leaf (kept in
    ``const``), else the container kind. ``container`` is the concrete type to rebuild (a
    namedtuple class, a list or dict subclass).
    """

    kind: str
    children: tuple[TreeSpec, ...] = ()
    keys: tuple[Any, ...] = ()
    container: type | None = None
    const: Any = None


def flatten(obj: object) -> tuple[list[Tensor], TreeSpec]:
    """Split a nested output into its tensor leaves (depth first) and the spec to rebuild it."""
    leaves: list[Tensor] = []
    spec = _flatten_into(obj, leaves)
    return leaves, spec


def _flatten_into(obj: object, leaves: list[Tensor]) -> TreeSpec:
    if isinstance(obj, Tensor):
        leaves.append(obj)
        return TreeSpec("tensor")
    if isinstance(obj, tuple):
        kind = "namedtuple" if hasattr(obj, "_fields") else "tuple"
        children = tuple(_flatten_into(item, leaves) for item in obj)
        return TreeSpec(kind, children, container=type(obj))
    if isinstance(obj, list):
        return TreeSpec("list", tuple(_flatten_into(i, leaves) for i in obj), container=type(obj))
    if isinstance(obj, dict):
        keys = tuple(obj.keys())
        children = tuple(_flatten_into(obj[k], leaves) for k in keys)
        return TreeSpec("dict", children, keys=keys, container=type(obj))
    return TreeSpec("const", const=obj)


def unflatten(spec: TreeSpec, leaves: Sequence[Tensor]) -> Any:
    """Rebuild the structure described by ``spec`` around ``leaves`` (in flatten order)."""
    it = iter(leaves)
    out = _build(spec, it)
    if next(it, None) is not None:
        raise ValueError(f"unflatten got more leaves than the spec holds ({len(leaves)} given)")
    return out


def _build(spec: TreeSpec, it: Iterator[Tensor]) -> Any:
    if spec.kind == "tensor":
        return next(it)
    if spec.kind == "const":
        return spec.const
    items = [_build(child, it) for child in spec.children]
    if spec.kind == "namedtuple":
        return spec.container(*items)  # type: ignore[misc]
    if spec.kind == "dict":
        built = dict(zip(spec.keys, items))
        return built if spec.container in (None, dict) else spec.container(built)
    container = spec.container or (tuple if spec.kind == "tuple" else list)
    return container(items)


def leaf_paths(spec: TreeSpec, root: str = "out") -> list[str]:
    """Readable path of each tensor leaf, in flatten order: ``out``, ``out[0]``, ``out['boxes']``."""
    paths: list[str] = []
    _paths_into(spec, root, paths)
    return paths


def _paths_into(spec: TreeSpec, prefix: str, paths: list[str]) -> None:
    if spec.kind == "tensor":
        paths.append(prefix)
        return
    if spec.kind == "dict":
        for key, child in zip(spec.keys, spec.children):
            _paths_into(child, f"{prefix}[{key!r}]", paths)
        return
    for index, child in enumerate(spec.children):
        _paths_into(child, f"{prefix}[{index}]", paths)
