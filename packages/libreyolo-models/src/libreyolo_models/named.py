"""Per-family shortcuts users of upstream LibreYOLO know: ``LibreYOLO9(size="s", nc=3)``.

Each is ``LibreYOLO(..., family=<name>)``; the object returned is a plain ``LibreYOLO``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .facade import LibreYOLO


def LibreYOLO9(model: str | Path | None = None, **kwargs: Any) -> LibreYOLO:  # noqa: N802 - upstream's name
    """YOLOv9: ``LibreYOLO9(size="t", nc=3)`` (untrained) or ``LibreYOLO9("best.pt")``."""
    return LibreYOLO(model, family="yolo9", **kwargs)


def LibreRTMDet(model: str | Path | None = None, **kwargs: Any) -> LibreYOLO:  # noqa: N802 - upstream's name
    """RTMDet: ``LibreRTMDet(size="s", nc=3)`` (untrained) or ``LibreRTMDet("LibreRTMDets.pt")``."""
    return LibreYOLO(model, family="rtmdet", **kwargs)
