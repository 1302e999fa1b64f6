"""The benchmarks' ``--extra package.module:callable`` hook: resolve the callable named by a spec,
and the shapes of what such a callable returns."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

from torch import Tensor, nn

InferCase = tuple[str, nn.Module, int]
"""What an inference factory returns (``bench_infer_graphs.py``): (row name, module, image size)."""

LossFn = Callable[[Any, tuple[Tensor, ...]], Tensor]
"""``loss_fn(outputs, inputs)``: outputs are whatever the module returns (a family's tensor tree)."""

TrainCase = tuple[str, nn.Module, tuple[Tensor, ...], LossFn]
"""What a training factory returns (``bench_train_graphs.py``): (row name, module, inputs on the
device, loss_fn)."""


def load_factory(spec: str, returns: str) -> Callable[..., Any]:
    """The callable ``spec`` names; exits with a message saying what it must return if malformed.
    Its type is unknown until called (any module's attribute): callers check what comes back."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        sys.exit(f"--extra {spec!r}: expected package.module:callable returning {returns}")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        sys.exit(f"--extra {spec!r}: {err}")
    if not callable(factory):
        sys.exit(f"--extra {spec!r}: {type(factory).__name__} is not callable; name a function returning {returns}")
    return factory
