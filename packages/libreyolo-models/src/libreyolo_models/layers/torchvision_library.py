"""torchvision's compiled operator libraries, loaded without importing the torchvision package.

``import torchvision`` imports ``torch._dynamo`` (6-9 s of CPU on a small machine), which a process
that only needs one kernel (NMS, the JPEG decoder) should not pay. The kernels live in
torchvision's extension libraries, which ``torch.ops.load_library`` loads in milliseconds and
which register the same ``torch.ops`` operators the package would.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
from collections.abc import Callable

import torch


def load_torchvision_library(names: tuple[str, ...], registered: Callable[[], bool]) -> str | None:
    """Load the first of torchvision's extension libraries ``names`` (e.g. ``_C_stable``, ``_C``)
    after which ``registered()`` holds; its path, or None when none is there or loads."""
    spec = importlib.util.find_spec("torchvision")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = next(iter(spec.submodule_search_locations))
    finder = importlib.machinery.FileFinder(
        folder, (importlib.machinery.ExtensionFileLoader, importlib.machinery.EXTENSION_SUFFIXES))
    for name in names:
        found = finder.find_spec(name)
        if found is None or not found.origin:
            continue
        try:
            torch.ops.load_library(found.origin)
        except (OSError, RuntimeError):
            continue
        if registered():
            return found.origin
    return None
