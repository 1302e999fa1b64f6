"""Importing coremltools safely: with TensorFlow installed (the ``tflite`` extra brings it),
coremltools 9.0 imports it, and on Linux that import aborts the whole process (``LLVM ERROR:
Option ... registered more than once``). TensorFlow is hidden from it while it is imported and
while it converts (it converts PyTorch models and needs none of it). Triton is loaded first in
any case (``optional.preload_triton``: TensorFlow may already be loaded by a TFLite export).
Drop when coremltools imports cleanly beside TensorFlow."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

from ..optional import preload_triton, require


@contextmanager
def tensorflow_hidden() -> Iterator[None]:
    """Make ``import tensorflow`` raise ImportError for the duration; restore what was loaded."""
    saved = {name: module for name, module in sys.modules.items()
             if name == "tensorflow" or name.startswith("tensorflow.")}
    for name in saved:
        del sys.modules[name]
    sys.modules["tensorflow"] = None  # type: ignore[assignment]  # None in sys.modules: the import raises
    try:
        yield
    finally:
        del sys.modules["tensorflow"]
        sys.modules.update(saved)


@contextmanager
def coremltools_quiet() -> Iterator[None]:
    """coremltools logs a warning per native proxy it lacks off macOS and per int64 constant it
    narrows, and an INFO line per folded constant: errors only, for the duration."""
    logger = logging.getLogger("coremltools")
    level = logger.level
    logger.setLevel(max(level, logging.ERROR))
    try:
        yield
    finally:
        logger.setLevel(level)


def import_coremltools(purpose: str) -> ModuleType:
    """coremltools (extra ``coreml``), imported with TensorFlow hidden, Triton first."""
    preload_triton()
    with tensorflow_hidden(), coremltools_quiet():
        return require("coremltools", "coreml", purpose)
