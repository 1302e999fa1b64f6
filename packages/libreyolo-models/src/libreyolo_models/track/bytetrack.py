"""ByteTrack: multi-object tracking by associating every detection box, the weak ones too.

Each frame, in order:

1. Split detections by score: *high* (``>= track_high_thresh``) and *low* (``track_low_thresh``
   up to the high threshold; anything lower is ignored).
2. Move every confirmed and lost track one frame ahead with its Kalman filter.
3. Match those tracks to the high detections (cost ``1 - IoU``, times the detection score when
   ``fuse_score``), keeping pairs with cost ``<= match_thresh``. A lost track that matches comes
   back with its old id.
4. Match the confirmed tracks still unmatched to the low detections (plain IoU >= 0.5). This is
   ByteTrack's point: an occluded, blurred object scores low but still continues its track.
   Confirmed tracks left over become lost.
5. Match tentative tracks (born last frame) to the remaining high detections (IoU cost
   ``<= 0.7``): matched ones are confirmed and get an id; the others are dropped.
6. Remaining high detections scoring ``>= new_track_thresh`` start tentative tracks (confirmed at
   once on the tracker's first frame, when there is nothing to confirm against).
7. Lost tracks unseen for more than ``track_buffer`` frames are removed for good.

Ids count up from 1 per tracker and are handed out on confirmation, so a track that never
confirms costs no id; an id is never handed out twice by one tracker.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from .matching import assign, iou_cost, iou_matrix
from .motion import XYAH, Motion

# Fixed thresholds of the later association stages (ByteTrack's published values): low-score
# detections must overlap well (IoU >= 0.5), tentative tracks a little less strictly (>= 0.3).
LOW_SCORE_MAX_COST = 0.5
TENTATIVE_MAX_COST = 0.7
# A confirmed and a lost track covering the same object (IoU above this) are duplicates.
DUPLICATE_IOU = 0.85


@dataclass(frozen=True)
class ByteTrackConfig:
    """ByteTrack's settings (the defaults are the ones ByteTrack and its ports publish).

    Attributes:
        track_high_thresh: score from which a detection is matched in the first stage.
        track_low_thresh: score from which a detection is used at all (second stage).
        new_track_thresh: score a leftover detection needs to start a track.
        track_buffer: frames a lost track is kept, to come back with its id.
        match_thresh: largest ``1 - IoU`` (score-fused) cost of a first-stage match.
        fuse_score: multiply IoU by the detection score in the first and tentative stages.
    """

    track_high_thresh: float = 0.5
    track_low_thresh: float = 0.1
    new_track_thresh: float = 0.6
    track_buffer: int = 30
    match_thresh: float = 0.8
    fuse_score: bool = True

    def __post_init__(self) -> None:
        for name in ("track_high_thresh", "track_low_thresh", "new_track_thresh", "match_thresh"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"{name}={value} must be between 0 and 1")
        if self.track_low_thresh > self.track_high_thresh:
            raise ConfigError(f"track_low_thresh={self.track_low_thresh} is above track_high_thresh="
                              f"{self.track_high_thresh}; the low threshold must be the smaller one (e.g. 0.1 and 0.5)")
        if self.track_buffer < 0:
            raise ConfigError(f"track_buffer={self.track_buffer} must be 0 or more frames (e.g. 30)")


class TrackState(enum.Enum):
    TENTATIVE = "tentative"   # born last frame, needs one more match to be confirmed
    TRACKED = "tracked"       # confirmed and matched this frame
    LOST = "lost"             # confirmed, unmatched for 1..track_buffer frames


class Track:
    """One object followed through frames: its Kalman state (of ``motion``'s filter) and bookkeeping."""

    def __init__(self, box: np.ndarray, score: float, cls: float, frame: int, motion: Motion = XYAH) -> None:
        self.motion = motion
        self.mean, self.cov = motion.initiate(box)
        self.score, self.cls = score, cls
        self.track_id = 0                 # 0 until confirmed
        self.state = TrackState.TENTATIVE
        self.start_frame = self.last_frame = frame
        self.det_index = -1               # index of this frame's matched detection

    @property
    def frame_span(self) -> int:
        """Frames from birth to the last match: how long this track has been followed."""
        return self.last_frame - self.start_frame

    @property
    def box(self) -> np.ndarray:
        """The filter's current box, ``[4]`` x1, y1, x2, y2."""
        return self.motion.box(self.mean)

    def correct(self, box: np.ndarray, score: float, cls: float, frame: int, det_index: int) -> None:
        self.mean, self.cov = self.motion.update(self.mean, self.cov, box)
        self.score, self.cls, self.last_frame, self.det_index = score, cls, frame, det_index
        if self.state is TrackState.LOST:
            self.state = TrackState.TRACKED

    def __repr__(self) -> str:
        return f"Track(id={self.track_id}, {self.state.value}, last_frame={self.last_frame})"


@dataclass(frozen=True)
class TrackOutput:
    """The tracks confirmed in a frame: ``det_index [M]`` rows of that frame's detections and
    their ``ids [M]`` (int64), in detection order."""

    det_index: np.ndarray
    ids: np.ndarray


class ByteTracker:
    """The ByteTrack association over a sequence of frames (one tracker per video or stream).

    Subclasses change the motion model (``motion``) and may move the predicted tracks before
    association (``_compensate``: BoT-SORT's camera-motion compensation)."""

    motion: Motion = XYAH
    wants_image = False
    """Whether ``update`` should get the frame (``image=``); the tracking loop reads it."""

    def __init__(self, config: ByteTrackConfig | None = None) -> None:
        self.config = config or ByteTrackConfig()
        self.reset()

    def reset(self) -> None:
        """Forget every track and start ids from 1 again (a new source)."""
        self.frame = 0
        self.tracks: list[Track] = []
        self._next_id = 1

    def update(self, boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray,
               image: np.ndarray | None = None) -> TrackOutput:
        """Advance one frame with its detections.

        Args:
            boxes: ``[N, 4]`` x1, y1, x2, y2 in pixels.
            scores: ``[N]`` confidences in [0, 1].
            classes: ``[N]`` class ids (association ignores them; a track reports its latest).
            image: the frame, RGB uint8 ``[H, W, 3]`` (read only by trackers with ``wants_image``).

        Returns:
            Which detections belong to confirmed tracks this frame, and their ids.
        """
        cfg = self.config
        self.frame += 1
        boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        scores = np.asarray(scores, dtype=np.float64).reshape(-1)
        classes = np.asarray(classes).reshape(-1)
        high = np.flatnonzero(scores >= cfg.track_high_thresh)
        low = np.flatnonzero((scores >= cfg.track_low_thresh) & (scores < cfg.track_high_thresh))

        pool = [t for t in self.tracks if t.state is not TrackState.TENTATIVE]
        tentative = [t for t in self.tracks if t.state is TrackState.TENTATIVE]
        self._predict(pool)
        self._compensate(pool + tentative, image, boxes)

        def match(tracks: list[Track], dets: np.ndarray, max_cost: float, fuse: bool) -> tuple[list[Track], np.ndarray]:
            track_boxes = np.array([t.box for t in tracks]).reshape(-1, 4)
            cost = iou_cost(track_boxes, boxes[dets], scores[dets] if fuse else None)
            pairs, free_tracks, free_dets = assign(cost, max_cost)
            for ti, di in pairs:
                d = int(dets[di])
                tracks[ti].correct(boxes[d], float(scores[d]), float(classes[d]), self.frame, d)
            return [tracks[i] for i in free_tracks], dets[free_dets]

        pool_left, high_left = match(pool, high, cfg.match_thresh, cfg.fuse_score)
        tracked_left = [t for t in pool_left if t.state is TrackState.TRACKED]
        unmatched, _ = match(tracked_left, low, LOW_SCORE_MAX_COST, False)
        for track in unmatched:
            track.state = TrackState.LOST
        dropped, high_left = match(tentative, high_left, TENTATIVE_MAX_COST, cfg.fuse_score)
        for track in tentative:
            if track.last_frame == self.frame:
                self._confirm(track)
        self.tracks = [t for t in self.tracks if not any(t is d for d in dropped)]
        for d in high_left:
            if scores[d] >= cfg.new_track_thresh:
                track = Track(boxes[d], float(scores[d]), float(classes[d]), self.frame, self.motion)
                track.det_index = int(d)
                if self.frame == 1:
                    self._confirm(track)
                self.tracks.append(track)
        self.tracks = [t for t in self.tracks
                       if not (t.state is TrackState.LOST and self.frame - t.last_frame > cfg.track_buffer)]
        self._drop_duplicates()
        live = sorted((t for t in self.tracks if t.state is TrackState.TRACKED and t.last_frame == self.frame),
                      key=lambda t: t.det_index)
        return TrackOutput(np.array([t.det_index for t in live], dtype=np.int64),
                           np.array([t.track_id for t in live], dtype=np.int64))

    def _confirm(self, track: Track) -> None:
        track.state = TrackState.TRACKED
        track.track_id = self._next_id
        self._next_id += 1

    def _compensate(self, tracks: list[Track], image: np.ndarray | None, boxes: np.ndarray) -> None:
        """Move the predicted ``tracks`` for the camera's own motion between the last frame and
        ``image`` (whose detections are ``boxes``); ByteTrack assumes a still camera."""

    def _predict(self, tracks: list[Track]) -> None:
        """One Kalman step for all ``tracks`` at once. A lost track's size velocity is zeroed
        first, so an object out of sight does not keep growing or shrinking."""
        if not tracks:
            return
        means = np.stack([t.mean for t in tracks])
        covs = np.stack([t.cov for t in tracks])
        lost = np.array([t.state is TrackState.LOST for t in tracks])
        for index in self.motion.size_velocity:
            means[lost, index] = 0.0
        means, covs = self.motion.predict(means, covs)
        for t, m, c in zip(tracks, means, covs):
            t.mean, t.cov = m, c

    def _drop_duplicates(self) -> None:
        """A lost track and a tracked one over the same object: keep the one followed longer."""
        tracked = [t for t in self.tracks if t.state is TrackState.TRACKED]
        lost = [t for t in self.tracks if t.state is TrackState.LOST]
        if not tracked or not lost:
            return
        overlap = iou_matrix(np.array([t.box for t in tracked]), np.array([t.box for t in lost]))
        gone: list[Track] = []
        for i, j in zip(*np.nonzero(overlap > DUPLICATE_IOU)):
            a, b = tracked[i], lost[j]
            gone.append(b if a.frame_span >= b.frame_span else a)
        self.tracks = [t for t in self.tracks if not any(t is g for g in gone)]
