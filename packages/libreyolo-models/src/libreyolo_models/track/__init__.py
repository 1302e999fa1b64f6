"""Multi-object tracking over predictions: ``model.track(source, tracker="bytetrack")``.

``kalman`` (the motion model), ``matching`` (IoU costs, optimal assignment), ``bytetrack`` (the
tracker), ``registry`` (trackers by name), ``session`` (per-source state, trails), ``runner``
(the loop behind ``model.track``).
"""

from .bytetrack import ByteTrackConfig, ByteTracker, TrackOutput
from .registry import TRACKERS, TrackerSpec, get_tracker
from .session import TrackSession

__all__ = ["TRACKERS", "ByteTrackConfig", "ByteTracker", "TrackOutput", "TrackSession", "TrackerSpec", "get_tracker"]
