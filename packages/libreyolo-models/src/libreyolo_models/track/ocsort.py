"""OC-SORT: SORT made robust to occlusion and non-linear motion by trusting observations over the
filter's estimates (Cao et al., "Observation-Centric SORT", CVPR 2023).

Three additions to SORT's Kalman filter and IoU association, each addressing what goes wrong
when an object is unseen for a while and the filter coasts on its last velocity:

- Observation-centric momentum (OCM): the association cost adds a direction term: how well the
  direction from a track's last observed box to a candidate detection agrees with the direction
  the track was moving in (from its observations ``delta_t`` frames apart, not the filter's noisy
  velocity). Two objects crossing then keep their own ways.
- Observation-centric recovery (OCR): tracks still unmatched are tried once more against the
  leftover detections from their *last observed* box rather than the drifted prediction.
- Observation-centric re-update (ORU): when a lost track is found again, its filter is rewound to
  the last observation and re-run over virtual boxes on the straight line to the new one, so the
  error accumulated while coasting is not kept.

With ``use_byte`` a ByteTrack-style stage also matches unmatched tracks to low-score boxes.
Ids count up from 1 and are handed out when a track is first reported (after ``min_hits``
consecutive matches, or at once in the first ``min_hits`` frames of a sequence); a track never
reported costs no id, and no id is handed out twice by one tracker.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from .bytetrack import TrackOutput
from .matching import assign, iou_matrix
from .motion import XYAH


@dataclass(frozen=True)
class OCSortConfig:
    """OC-SORT's settings (the defaults are the published ones).

    Attributes:
        det_thresh: score from which a detection is associated first and may start a track.
        low_thresh: with ``use_byte``, score from which a weak detection may continue a track.
        max_age: frames a track unseen is kept, to come back with its id.
        min_hits: consecutive matches before a track is reported.
        iou_threshold: smallest IoU of any match.
        delta_t: frames between the two observations that give a track's direction.
        inertia: weight of the direction-consistency term against IoU.
        use_byte: also match unmatched tracks to detections between ``low_thresh`` and ``det_thresh``.
    """

    det_thresh: float = 0.6
    low_thresh: float = 0.1
    max_age: int = 30
    min_hits: int = 3
    iou_threshold: float = 0.3
    delta_t: int = 3
    inertia: float = 0.2
    use_byte: bool = True

    def __post_init__(self) -> None:
        for name in ("det_thresh", "low_thresh", "iou_threshold", "inertia"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"{name}={value} must be between 0 and 1")
        if self.low_thresh > self.det_thresh:
            raise ConfigError(f"low_thresh={self.low_thresh} is above det_thresh={self.det_thresh}; the low "
                              "threshold must be the smaller one (e.g. 0.1 and 0.6)")
        for name, floor in (("max_age", 0), ("min_hits", 0), ("delta_t", 1)):
            if getattr(self, name) < floor:
                raise ConfigError(f"{name}={getattr(self, name)} must be at least {floor}")


def _centre(box: np.ndarray) -> np.ndarray:
    return np.array([(box[0] + box[2]) / 2, (box[1] + box[3]) / 2])


def _unit(vector: np.ndarray) -> np.ndarray:
    norm = float(np.hypot(*vector))
    return vector / norm if norm > 1e-6 else np.zeros(2)


class OCTrack:
    """One object: its filter, its recent observations, the filter state at the last one."""

    def __init__(self, box: np.ndarray, score: float, cls: float, frame: int, delta_t: int) -> None:
        self.mean, self.cov = XYAH.initiate(box)
        self.saved = (self.mean.copy(), self.cov.copy())    # the state right after the last observation
        self.observations: deque[tuple[int, np.ndarray]] = deque([(frame, box.copy())], maxlen=delta_t + 1)
        self.score, self.cls = score, cls
        self.track_id = 0
        self.hit_streak = 0
        self.last_frame = frame
        self.det_index = -1

    @property
    def box(self) -> np.ndarray:
        return XYAH.box(self.mean)

    @property
    def last_box(self) -> np.ndarray:
        return self.observations[-1][1]

    @property
    def direction(self) -> np.ndarray:
        """Unit ``(dx, dy)`` from the oldest kept observation to the latest (zero with only one)."""
        if len(self.observations) < 2:
            return np.zeros(2)
        return _unit(_centre(self.observations[-1][1]) - _centre(self.observations[0][1]))

    def predict(self, frame: int) -> None:
        if frame - self.last_frame > 1:   # missed last frame: the streak is broken
            self.hit_streak = 0
        self.mean, self.cov = XYAH.predict(self.mean, self.cov)

    def observe(self, box: np.ndarray, score: float, cls: float, frame: int, det_index: int) -> None:
        gap = frame - self.last_frame
        if gap > 1:   # re-update: rewind to the last observation, re-run over a straight path to this box
            self.mean, self.cov = self.saved
            start = self.last_box
            for step in range(1, gap):
                virtual = start + (box - start) * step / gap
                self.mean, self.cov = XYAH.predict(self.mean, self.cov)
                self.mean, self.cov = XYAH.update(self.mean, self.cov, virtual)
            self.mean, self.cov = XYAH.predict(self.mean, self.cov)
        self.mean, self.cov = XYAH.update(self.mean, self.cov, box)
        self.saved = (self.mean.copy(), self.cov.copy())
        self.observations.append((frame, box.copy()))
        self.score, self.cls, self.last_frame, self.det_index = score, cls, frame, det_index
        self.hit_streak += 1


class OCSort:
    """OC-SORT association over a sequence of frames (one tracker per video or stream)."""

    wants_image = False

    def __init__(self, config: OCSortConfig | None = None) -> None:
        self.config = config or OCSortConfig()
        self.reset()

    def reset(self) -> None:
        """Forget every track and start ids from 1 again (a new source)."""
        self.frame = 0
        self.tracks: list[OCTrack] = []
        self._next_id = 1

    def update(self, boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray,
               image: np.ndarray | None = None) -> TrackOutput:
        """Advance one frame (arguments as ``ByteTracker.update``; ``image`` is not read)."""
        cfg = self.config
        self.frame += 1
        boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        scores = np.asarray(scores, dtype=np.float64).reshape(-1)
        classes = np.asarray(classes).reshape(-1)
        high = np.flatnonzero(scores >= cfg.det_thresh)
        low = np.flatnonzero((scores >= cfg.low_thresh) & (scores < cfg.det_thresh))
        for track in self.tracks:
            track.predict(self.frame)

        def match(tracks: list[OCTrack], dets: np.ndarray, track_boxes: np.ndarray,
                  momentum: bool) -> tuple[list[OCTrack], np.ndarray]:
            iou = iou_matrix(track_boxes.reshape(-1, 4), boxes[dets])
            score = iou + (self._momentum(tracks, boxes[dets], scores[dets]) if momentum else 0.0)
            pairs, _, _ = assign(-score, max_cost=np.inf)
            pairs = [(t, d) for t, d in pairs if iou[t, d] >= cfg.iou_threshold]
            for ti, di in pairs:
                d = int(dets[di])
                tracks[ti].observe(boxes[d], float(scores[d]), float(classes[d]), self.frame, d)
            used_t, used_d = {t for t, _ in pairs}, {d for _, d in pairs}
            return ([t for i, t in enumerate(tracks) if i not in used_t],
                    np.array([d for i, d in enumerate(dets) if i not in used_d], dtype=np.int64))

        tracks = list(self.tracks)
        tracks, high_left = match(tracks, high, np.array([t.box for t in tracks]), momentum=True)
        if cfg.use_byte and len(low):
            tracks, _ = match(tracks, low, np.array([t.box for t in tracks]), momentum=False)
        tracks, high_left = match(tracks, high_left, np.array([t.last_box for t in tracks]), momentum=False)
        for d in high_left:
            track = OCTrack(boxes[d], float(scores[d]), float(classes[d]), self.frame, cfg.delta_t)
            track.det_index = int(d)
            self.tracks.append(track)
        self.tracks = [t for t in self.tracks if self.frame - t.last_frame <= cfg.max_age]
        live = []
        for track in self.tracks:
            if track.last_frame != self.frame:
                continue
            if track.track_id == 0 and (track.hit_streak >= cfg.min_hits or self.frame <= cfg.min_hits):
                track.track_id, self._next_id = self._next_id, self._next_id + 1
            if track.track_id:
                live.append(track)
        live.sort(key=lambda t: t.det_index)
        return TrackOutput(np.array([t.det_index for t in live], dtype=np.int64),
                           np.array([t.track_id for t in live], dtype=np.int64))

    def _momentum(self, tracks: list[OCTrack], det_boxes: np.ndarray, det_scores: np.ndarray) -> np.ndarray:
        """``[T, D]`` direction consistency in [-0.5, 0.5] x ``inertia`` x detection score: how well
        the way from each track's last observation to each detection agrees with its direction
        (0 for a track with no direction yet)."""
        if not tracks or not len(det_boxes):
            return np.zeros((len(tracks), len(det_boxes)))
        directions = np.array([t.direction for t in tracks])                        # [T, 2]
        last = np.array([_centre(t.last_box) for t in tracks])                      # [T, 2]
        centres = (det_boxes[:, :2] + det_boxes[:, 2:]) / 2                          # [D, 2]
        way = centres[None, :, :] - last[:, None, :]                                # [T, D, 2]
        way /= np.maximum(np.linalg.norm(way, axis=-1, keepdims=True), 1e-6)
        cosine = np.clip((way * directions[:, None, :]).sum(-1), -1.0, 1.0)
        consistency = (np.pi / 2 - np.abs(np.arccos(cosine))) / np.pi               # [-0.5, 0.5]
        has_direction = np.linalg.norm(directions, axis=1) > 0
        return consistency * has_direction[:, None] * self.config.inertia * det_scores[None, :]
