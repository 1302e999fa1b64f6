"""Eligibility checks shared by the runners: which calls can drive a CUDA graph, and why not.

Each check returns a reason string (or None) rather than raising: a call that cannot be
graphed runs eager and the reason is counted, so the same text serves logs and ``info()``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, cast

from torch import Tensor, nn

from .errors import GraphConfigError, GraphInputError

GraphMode = Literal["off", "on", "auto"]
_MODES: tuple[str, ...] = ("off", "on", "auto")


def check_mode(mode: object, source: str) -> GraphMode:
    """Return ``mode`` if it is a valid :data:`GraphMode`, else raise naming ``source``."""
    if mode not in _MODES:
        raise GraphConfigError(f"{source}: mode={mode!r} is not one of {', '.join(map(repr, _MODES))}")
    return cast(GraphMode, mode)


def one_line(err: BaseException) -> str:
    """``Type: first line of the message``, at most 300 characters, for logs and reasons."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:300]


def require_tensors(inputs: Sequence[object], name: str) -> None:
    """Raise :class:`GraphInputError` naming the first argument that is not a tensor."""
    for i, x in enumerate(inputs):
        if not isinstance(x, Tensor):
            raise GraphInputError(
                f"{name}: argument {i} is a {type(x).__name__}; graph runners take tensors only, "
                "as positional arguments. Bind other arguments with functools.partial or a lambda."
            )


def device_reason(inputs: Sequence[Tensor]) -> str | None:
    """Why these inputs cannot drive a CUDA graph (device-wise), or None."""
    if not inputs:
        return "no tensor inputs: nothing says which CUDA device to capture on"
    first = inputs[0].device
    for i, x in enumerate(inputs):
        if x.device.type != "cuda":
            return f"input {i} is on {x.device.type}: CUDA graphs need CUDA tensors"
        if x.device != first:
            return f"inputs are on several devices ({first} and {x.device}); a graph runs on one"
    return None


def expanded_input_reason(inputs: Sequence[Tensor]) -> str | None:
    """Why an input cannot be copied into a static buffer of its own layout, or None."""
    for i, x in enumerate(inputs):
        if any(st == 0 and size > 1 for st, size in zip(x.stride(), x.shape)):
            return f"input {i} is expanded (a stride is 0); pass x.contiguous() to graph it"
    return None


def name_of(fn: object) -> str:
    """A short name for logs: the module class, or the function's qualified name."""
    if isinstance(fn, nn.Module):
        return type(fn).__name__
    return str(getattr(fn, "__qualname__", type(fn).__name__))
