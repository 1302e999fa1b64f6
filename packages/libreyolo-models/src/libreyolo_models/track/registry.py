"""The trackers ``model.track(tracker=...)`` knows, as one table (name -> settings and builder),
and the protocol a tracker of your own follows (``tracker="my_module:MyTracker"``).

A tracker of your own is a class; LibreYOLO imports ``my_module`` (it must be importable: on
``sys.path``, or installed) and uses ``MyTracker`` like a built-in one::

    from dataclasses import dataclass
    import numpy as np
    from libreyolo_models.track import TrackOutput

    @dataclass(frozen=True)
    class MySettings:                 # optional: model.track(..., gate=0.4) fills it
        gate: float = 0.3
        low: float = 0.1

    class MyTracker:
        config_class = MySettings     # optional; without it the class is built with no argument
        score_floor = "low"           # optional: the settings field predict lowers ``conf`` to
        wants_image = False           # optional: True and update() also gets image= (RGB uint8 [H, W, 3])

        def __init__(self, config: MySettings) -> None: ...
        def reset(self) -> None: ...  # a new source starts: forget every track
        def update(self, boxes, scores, classes):    # [N, 4] xyxy pixels, [N], [N] (NumPy)
            return TrackOutput(det_index=np.array([...]), ids=np.array([...]))

``update`` returns which rows of this frame's detections are tracked (``det_index``, int64) and
their ids (``ids``, int64, one per row, stable per object); a ``(det_index, ids)`` tuple works
too. Rows it leaves out are not shown. Without ``score_floor`` predict keeps its own ``conf``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, Protocol

import numpy as np

from ..config import suggest
from ..errors import ConfigError
from .botsort import BoTSORT, BoTSORTConfig
from .bytetrack import ByteTrackConfig, ByteTracker, TrackOutput
from .ocsort import OCSort, OCSortConfig


class Tracker(Protocol):
    """What the tracking loop needs from a tracker: one update per frame, and a reset."""

    def update(self, boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray) -> TrackOutput: ...

    def reset(self) -> None: ...


@dataclass(frozen=True)
class NoSettings:
    """The settings of a user's tracker that declares none (``track()`` then takes no tracker option)."""


@dataclass(frozen=True)
class TrackerSpec:
    """One tracker: its settings dataclass, how to build it from them, the settings field that
    holds the lowest detection score it uses (predict must let those through; None: predict's
    ``conf``), and whether its ``update`` takes the frame (``image=``)."""

    name: str
    config: type
    build: Callable[[Any], Tracker]
    score_floor: str | None
    summary: str
    wants_image: bool = False

    def option_names(self) -> set[str]:
        return {f.name for f in fields(self.config)}


TRACKERS: dict[str, TrackerSpec] = {s.name: s for s in (
    TrackerSpec("bytetrack", ByteTrackConfig, ByteTracker, "track_low_thresh",
                "Kalman motion + two-stage IoU association of high- and low-score boxes"),
    TrackerSpec("botsort", BoTSORTConfig, BoTSORT, "track_low_thresh",
                "ByteTrack's association, a width/height Kalman filter and camera-motion compensation",
                wants_image=True),
    TrackerSpec("ocsort", OCSortConfig, OCSort, "low_thresh",
                "SORT with observation-centric momentum, recovery and re-update (occlusion, non-linear motion)"),
)}

_USER_TRACKERS: dict[str, TrackerSpec] = {}   # one spec per "module:Class", so persist=True continues


def get_tracker(name: str) -> TrackerSpec:
    """The tracker called ``name``: a built-in one, or ``"module:Class"`` (see the module docstring);
    an unknown name lists the known ones."""
    if ":" in str(name):
        return _user_tracker(str(name))
    key = str(name).lower()
    if key not in TRACKERS:
        raise ConfigError(f"tracker={name!r} is not a known tracker{suggest(key, TRACKERS)}; "
                          f"known: {', '.join(sorted(TRACKERS))}, or 'module:Class' for your own "
                          "(see libreyolo_models.track.registry)")
    return TRACKERS[key]


def _user_tracker(name: str) -> TrackerSpec:
    if name in _USER_TRACKERS:
        return _USER_TRACKERS[name]
    module_name, _, class_name = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ConfigError(f"tracker={name!r}: cannot import module {module_name!r} ({err}); it must be importable "
                          "from this Python (on sys.path or installed)") from err
    cls = getattr(module, class_name, None)
    if cls is None or not callable(getattr(cls, "update", None)) or not callable(getattr(cls, "reset", None)):
        raise ConfigError(f"tracker={name!r}: {module_name} has no class {class_name!r} with update() and reset() "
                          "methods (the protocol is in libreyolo_models.track.registry)")
    settings = getattr(cls, "config_class", None)
    if settings is not None and not (isinstance(settings, type) and is_dataclass(settings)):
        raise ConfigError(f"tracker={name!r}: config_class must be a dataclass of the tracker's settings, "
                          f"not {settings!r}")
    floor = getattr(cls, "score_floor", None)
    if floor is not None and (settings is None or floor not in {f.name for f in fields(settings)}):
        raise ConfigError(f"tracker={name!r}: score_floor={floor!r} must name a field of its config_class")

    def build(config: Any) -> Tracker:
        return _UserTracker(cls(config) if settings is not None else cls())

    spec = TrackerSpec(name, settings or NoSettings, build, floor, f"{cls.__module__}.{cls.__qualname__}",
                       wants_image=bool(getattr(cls, "wants_image", False)))
    _USER_TRACKERS[name] = spec
    return spec


class _UserTracker:
    """A user's tracker with its answers checked (arrays of the right kind and length), so a
    mistake there reads as the tracker's, not as a crash deep in the tracking loop."""

    def __init__(self, tracker: Any) -> None:
        self.tracker = tracker

    def reset(self) -> None:
        self.tracker.reset()

    def update(self, boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, **extra: Any) -> TrackOutput:
        out = self.tracker.update(boxes, scores, classes, **extra)
        det_index, ids = (out.det_index, out.ids) if hasattr(out, "det_index") else out
        det_index = np.asarray(det_index, dtype=np.int64).reshape(-1)
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if len(det_index) != len(ids) or (len(det_index) and not 0 <= det_index.min() <= det_index.max() < len(boxes)):
            raise ValueError(f"tracker {type(self.tracker).__name__}.update returned det_index {det_index.tolist()} "
                             f"and ids {ids.tolist()} for {len(boxes)} detections: give one id per row, rows in "
                             f"0..{len(boxes) - 1}")
        return TrackOutput(det_index, ids)
