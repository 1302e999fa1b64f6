"""Optional dependencies: import them on first use, and name the extra that installs them.

Runtimes for exported models (onnxruntime, OpenVINO) are extras of ``libreyolo-models``, so a user
who only trains never installs them. A missing one is a ``MissingExtraError`` (an ``ImportError``
and a ``LibreYOLOError``: the command line prints it as one line) whose message is the command
that fixes it, not a bare ``No module named ...``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import MissingExtraError


def require(module: str, extra: str, purpose: str) -> ModuleType:
    """Import ``module`` or raise ``MissingExtraError`` naming ``extra`` (``pip install 'libreyolo[onnx]'``)."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingExtraError(f"{purpose} needs the {module!r} package, which is not installed: "
                          f"pip install 'libreyolo[{extra}]' (or 'libreyolo-models[{extra}]')") from err


def find_version(dist: str) -> str | None:
    """The installed version of distribution ``dist``, or None when it is absent."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def preload_triton() -> None:
    """Import Triton, where installed, before anything imports TensorFlow.

    Both link LLVM and register its command-line options at load time; Triton loaded after
    TensorFlow aborts the whole process (``LLVM ERROR: inconsistency in registered CommandLine
    options``), the other order is fine. Triton comes with the CUDA builds of torch, and torch
    imports it lazily (``torch.compile``, coremltools' torch frontend), so the TFLite and CoreML
    exporters call this first. Drop when TensorFlow and Triton stop sharing LLVM's registry."""
    try:
        importlib.import_module("triton")
    except ImportError:
        pass
