"""The benchmarks' ``--extra package.module:callable`` hook: resolve the callable named by a spec."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def load_factory(spec: str, returns: str) -> Callable[..., Any]:
    """The callable ``spec`` names; exits with a message saying what it must return if malformed."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        sys.exit(f"--extra {spec!r}: expected package.module:callable returning {returns}")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        sys.exit(f"--extra {spec!r}: {err}")
