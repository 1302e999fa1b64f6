"""Multi-object tracking over predictions: ``model.track(source, tracker="bytetrack")``.

``kalman`` and ``kalman_xywh`` (the motion models, behind ``motion``), ``matching`` (IoU costs,
optimal assignment), ``camera_motion`` (the frame-to-frame warp), the trackers (``bytetrack``,
``botsort``, ``ocsort``), ``registry`` (trackers by name, and the protocol of your own),
``session`` (per-source state, trails), ``runner`` (the loop behind ``model.track``).
"""

from .botsort import BoTSORT, BoTSORTConfig
from .bytetrack import ByteTrackConfig, ByteTracker, TrackOutput
from .ocsort import OCSort, OCSortConfig
from .registry import TRACKERS, TrackerSpec, get_tracker
from .session import TrackSession

__all__ = ["TRACKERS", "BoTSORT", "BoTSORTConfig", "ByteTrackConfig", "ByteTracker", "OCSort", "OCSortConfig",
           "TrackOutput", "TrackSession", "TrackerSpec", "get_tracker"]
