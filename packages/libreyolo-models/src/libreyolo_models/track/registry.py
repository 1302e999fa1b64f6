"""The trackers ``model.track(tracker=...)`` knows, as one table: name -> settings and builder."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Protocol

import numpy as np

from ..config import suggest
from ..errors import ConfigError
from .bytetrack import ByteTrackConfig, ByteTracker, TrackOutput


class Tracker(Protocol):
    """What the tracking loop needs from a tracker: one update per frame, and a reset."""

    def update(self, boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray) -> TrackOutput: ...

    def reset(self) -> None: ...


@dataclass(frozen=True)
class TrackerSpec:
    """One tracker: its settings dataclass, how to build it from them, and the settings field
    that holds the lowest detection score it uses (predict must let those through)."""

    name: str
    config: type
    build: Callable[[Any], Tracker]
    score_floor: str
    summary: str

    def option_names(self) -> set[str]:
        return {f.name for f in fields(self.config)}


TRACKERS: dict[str, TrackerSpec] = {s.name: s for s in (
    TrackerSpec("bytetrack", ByteTrackConfig, ByteTracker, "track_low_thresh",
                "Kalman motion + two-stage IoU association of high- and low-score boxes"),
)}


def get_tracker(name: str) -> TrackerSpec:
    """The tracker called ``name``; an unknown name lists the known ones."""
    key = str(name).lower()
    if key not in TRACKERS:
        raise ConfigError(f"tracker={name!r} is not a known tracker{suggest(key, TRACKERS)}; "
                          f"known: {', '.join(sorted(TRACKERS))}")
    return TRACKERS[key]
