"""Where a module's parameters and buffers live, and a cheap check that they have not moved.

A captured graph reads parameters and buffers at the addresses they had at capture. Moving or
replacing them (``.to()``, ``.half()``, ``load_state_dict(..., assign=True)``, a new submodule)
must drop the graph before it replays against freed memory; in-place value updates (an
optimizer step, ``copy_``) must not, since the graph reads whatever values sit there.

The full fingerprint walks every module, which costs milliseconds on a large network: too
much before every replay. :class:`StorageWatch` instead keeps the walk's result and checks,
per call, (1) a process-wide counter that torch's module registration hooks bump whenever any
parameter, buffer or submodule is assigned or registered, (2) that every dict entry it saw is
still the same object, and (3) that every tensor still has the same ``data_ptr``. Any doubt
triggers the full comparison.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import torch
from torch import Tensor, nn
from torch.nn.parameter import UninitializedTensorMixin  # type: ignore[attr-defined]  # not in torch's stubs

Fingerprint = tuple[tuple[int, torch.dtype, tuple[int, ...], int], ...]

_MISSING = object()
_generation = 0
_hooks_lock = threading.Lock()
_hooks_installed: bool | None = None  # None: not tried yet; False: this torch has no such hooks


def _bump(*_args: object) -> None:
    global _generation
    _generation += 1  # a lost increment under a race still changes the value


def _ensure_hooks() -> bool:
    """Install the global registration hooks once; False where torch lacks them."""
    global _hooks_installed
    with _hooks_lock:
        if _hooks_installed is None:
            from torch.nn.modules import module as module_mod

            names = (
                "register_module_parameter_registration_hook",
                "register_module_buffer_registration_hook",
                "register_module_module_registration_hook",
            )
            found = [getattr(module_mod, n, None) for n in names]
            _hooks_installed = all(found)
            if _hooks_installed:
                for register in found:
                    register(_bump)  # type: ignore[misc]
        return bool(_hooks_installed)


def _walk_tensors(module: nn.Module, out: list[Tensor | None]) -> None:
    # Walks the dicts directly: nn.Module.parameters() deduplicates through memo sets and
    # costs several times more.
    out.extend(module._parameters.values())
    out.extend(module._buffers.values())
    for child in module._modules.values():
        if child is not None:
            _walk_tensors(child, out)


def storage_fingerprint(module: nn.Module | None) -> Fingerprint:
    """(data_ptr, dtype, shape, device index) of every parameter and buffer, in module order."""
    if module is None:
        return ()
    tensors: list[Tensor | None] = []
    _walk_tensors(module, tensors)
    return tuple(_entry(t) for t in tensors if t is not None)


def _is_lazy(t: Tensor) -> bool:
    return isinstance(t, UninitializedTensorMixin)


def _entry(t: Tensor) -> tuple[int, torch.dtype, tuple[int, ...], int]:
    if _is_lazy(t):  # a LazyModule's parameter has no storage until its first forward
        return (0, t.dtype, (), -2)
    return (t.data_ptr(), t.dtype, t.shape, t.get_device())


def _named_tensors(module: nn.Module, prefix: str = "") -> Iterator[tuple[str, Tensor]]:
    for name, t in (*module._parameters.items(), *module._buffers.items()):
        if t is not None:
            yield prefix + name, t
    for name, child in module._modules.items():
        if child is not None:
            yield from _named_tensors(child, f"{prefix}{name}.")


def describe_storage_change(module: nn.Module | None, before: Fingerprint) -> str:
    """Say what moved since ``before``: how many tensors, and the first one by name."""
    if module is None:
        return "watched module is gone"
    named = list(_named_tensors(module))
    now = storage_fingerprint(module)
    if len(now) != len(before):
        return f"parameter/buffer count changed from {len(before)} to {len(now)}"
    changed = [i for i, (a, b) in enumerate(zip(before, now)) if a != b]
    if not changed:
        return "storage unchanged"
    first = changed[0]
    name = named[first][0] if first < len(named) else f"#{first}"
    _, dtype_a, shape_a, dev_a = before[first]
    _, dtype_b, shape_b, dev_b = now[first]
    return (
        f"{len(changed)} of {len(now)} parameters/buffers moved or were replaced, first "
        f"{name!r} ({dtype_a} {list(shape_a)} dev {dev_a} -> {dtype_b} {list(shape_b)} dev {dev_b})"
    )


def _walk_slots(module: nn.Module, slots: list[tuple[dict, str, object]], params: list[Tensor]) -> None:
    for entries in (module._parameters, module._buffers, module._modules):
        for key, value in entries.items():
            slots.append((entries, key, value))
    params.extend(p for p in module._parameters.values() if p is not None)
    for child in module._modules.values():
        if child is not None:
            _walk_slots(child, slots, params)


class StorageWatch:
    """Tells, cheaply and before every replay, whether a module's storage moved since last asked.

    Limitation: an entry inserted straight into a module's private dicts (bypassing
    ``register_*`` and attribute assignment, which fire torch's hooks) is seen only by the full
    walk; call the runner's ``invalidate()`` after such surgery.
    """

    def __init__(self, module: nn.Module) -> None:
        self.module = module
        self._hooked = _ensure_hooks()
        self._snapshot()

    def _snapshot(self) -> None:
        self._generation = _generation
        slots: list[tuple[dict, str, object]] = []
        params: list[Tensor] = []
        _walk_slots(self.module, slots, params)
        self._slots = slots
        self._params = params
        tensors = [v for _, _, v in slots if isinstance(v, Tensor)]
        # Lazy parameters materialise in place (same object, no hook): until none is left,
        # every call takes the full comparison.
        self._has_lazy = any(_is_lazy(t) for t in tensors)
        self._tensors = [t for t in tensors if not _is_lazy(t)]
        self._ptrs = [t.data_ptr() for t in self._tensors]
        self.fingerprint = storage_fingerprint(self.module)

    def _looks_unchanged(self) -> bool:
        if not self._hooked or self._has_lazy or self._generation != _generation:
            return False
        for entries, key, value in self._slots:
            if entries.get(key, _MISSING) is not value:
                return False
        return self._ptrs == [t.data_ptr() for t in self._tensors]

    def changed(self) -> str | None:
        """A description of what moved since the previous call (or creation), else None.

        The watch then follows the new state, so each move is reported once.
        """
        if self._looks_unchanged():
            return None
        before = self.fingerprint
        reason = None
        if storage_fingerprint(self.module) != before:
            reason = describe_storage_change(self.module, before)
        self._snapshot()
        return reason

    def trainable(self) -> tuple[bool, ...]:
        """``requires_grad`` of every parameter, in module order (cheap: no module walk)."""
        return tuple(p.requires_grad for p in self._params)
