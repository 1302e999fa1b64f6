"""Per-family shortcuts users of upstream LibreYOLO know: ``LibreYOLO9(size="s", nc=3)``,
``LibreRTDETR(size="r18")``, ``LibreYOLOX(size="n")``, ``LibreResNet(size="50")``.

One per registered family, named by its weight prefix and made from the registry, so a new
family (or one registered by a plugin) has its shortcut without an edit here. Each is
``LibreYOLO(..., family=<name>)``; the object returned is a plain ``LibreYOLO``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from .facade import LibreYOLO
from .zoo.registry import families

Shortcut = Callable[..., LibreYOLO]


def shortcut_names() -> list[str]:
    """Every shortcut's name (the families' weight prefixes), built-in and registered."""
    return [spec.weight_prefix for spec in families().values()]


def shortcut(name: str) -> Shortcut:
    """The shortcut called ``name`` (``"LibreYOLO9"``); AttributeError when no family has that prefix."""
    for spec in families().values():
        if spec.weight_prefix == name:
            return _make(spec.name, spec.display_name, spec.weight_prefix, spec.default_size)
    raise AttributeError(f"module 'libreyolo_models' has no attribute {name!r}")


def _make(family: str, display: str, prefix: str, size: str) -> Shortcut:
    def build(model: str | Path | None = None, **kwargs: Any) -> LibreYOLO:
        return LibreYOLO(model, family=family, **kwargs)

    build.__name__ = build.__qualname__ = prefix
    build.__doc__ = (f"{display}: ``{prefix}(size={size!r}, nc=3)`` (untrained) or "
                     f"``{prefix}(\"{prefix}{size}.pt\")``; a plain ``LibreYOLO`` of family {family!r}.")
    return build
