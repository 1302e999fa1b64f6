"""ByteTrack on synthetic detection sequences, and its Kalman filter against hand-worked numbers."""

from __future__ import annotations

import numpy as np
import pytest

from libreyolo_models.errors import ConfigError
from libreyolo_models.track import ByteTrackConfig, ByteTracker, get_tracker, kalman
from libreyolo_models.track.matching import assign, iou_matrix


def test_kalman_initiate_predict_update_match_hand_worked_numbers() -> None:
    # Box xyah (10, 20, 0.5, 40): position std 2*40/20 = 4 (var 16), velocity std 10*40/160 = 2.5 (6.25).
    mean, cov = kalman.initiate(np.array([10.0, 20.0, 0.5, 40.0]))
    assert np.allclose(mean, [10, 20, 0.5, 40, 0, 0, 0, 0])
    assert np.allclose(np.diag(cov)[[0, 1, 3, 4, 5, 7]], [16, 16, 16, 6.25, 6.25, 6.25])
    # Predict: position var 16 + 6.25 (velocity) + 2^2 (process) = 26.25; velocity 6.25 + 0.25^2.
    mean, cov = kalman.predict(mean, cov)
    assert np.allclose(mean[:4], [10, 20, 0.5, 40])
    assert cov[0, 0] == pytest.approx(26.25) and cov[4, 4] == pytest.approx(6.3125) and cov[0, 4] == pytest.approx(6.25)
    # Update with cx = 16: innovation 6, S = 26.25 + 2^2 = 30.25, gains 26.25/30.25 and 6.25/30.25.
    mean, cov = kalman.update(mean, cov, np.array([16.0, 20.0, 0.5, 40.0]))
    assert mean[0] == pytest.approx(10 + 6 * 26.25 / 30.25)
    assert mean[4] == pytest.approx(6 * 6.25 / 30.25)
    assert cov[0, 0] == pytest.approx(26.25 - 26.25**2 / 30.25)
    assert np.allclose(cov, cov.T)


def test_kalman_batched_predict_equals_one_at_a_time() -> None:
    boxes = np.array([[10.0, 20, 0.5, 40], [50, 60, 1.2, 10]])
    means, covs = kalman.initiate(boxes)
    means[:, 4] = [3.0, -1.0]
    b_mean, b_cov = kalman.predict(means, covs)
    for i in range(2):
        m, c = kalman.predict(means[i], covs[i])
        assert np.allclose(m, b_mean[i]) and np.allclose(c, b_cov[i])
    assert np.allclose(b_mean[:, 0], [13.0, 49.0])


def test_box_conversions_round_trip() -> None:
    xyxy = np.array([[10.0, 20, 30, 60], [0, 0, 5, 5]])
    assert np.allclose(kalman.xyah_to_xyxy(kalman.xyxy_to_xyah(xyxy)), xyxy)


def test_assignment_drops_pairs_over_the_cost_threshold() -> None:
    a = np.array([[0, 0, 10, 10], [100, 100, 110, 110]])
    b = np.array([[1, 1, 11, 11], [50, 50, 60, 60]])
    assert np.isclose(iou_matrix(a, b)[0, 0], 81 / 119)
    pairs, rows, cols = assign(1 - iou_matrix(a, b), max_cost=0.8)
    assert pairs == [(0, 0)] and rows == [1] and cols == [1]


def _run(tracker: ByteTracker, frames: list[list[tuple[float, float, float, float, float]]]) -> list[dict[int, int]]:
    """Feed ``frames`` (rows x1, y1, x2, y2, score; the row order is each object's label) and
    return, per frame, {object label: track id}."""
    out = []
    for dets in frames:
        arr = np.array(dets, dtype=np.float64).reshape(-1, 5)
        result = tracker.update(arr[:, :4], arr[:, 4], np.zeros(len(arr)))
        out.append({int(d): int(i) for d, i in zip(result.det_index, result.ids)})
    return out


def _box(cx: float, cy: float, score: float = 0.9, w: float = 30, h: float = 40) -> tuple[float, ...]:
    return (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2, score)


def test_two_crossing_objects_keep_their_ids() -> None:
    # Two boxes on nearly the same line, moving towards each other at 6 px per frame; they overlap
    # heavily around frame 10 and come out the other side.
    frames = [[_box(40 + 6 * f, 100), _box(160 - 6 * f, 108)] for f in range(21)]
    seen = _run(ByteTracker(), frames)
    assert all(s == {0: 1, 1: 2} for s in seen), seen


def test_a_short_gap_keeps_the_id_and_a_long_one_gets_a_new_id() -> None:
    cfg = ByteTrackConfig(track_buffer=5)
    moving = [_box(50 + 4 * f, 80) for f in range(30)]
    short = [[b] if not 5 <= f < 10 else [] for f, b in enumerate(moving)]     # gone 5 frames
    seen = _run(ByteTracker(cfg), short)
    assert {s.get(0) for f, s in enumerate(seen) if s} == {1}
    long = [[b] if not 5 <= f < 11 else [] for f, b in enumerate(moving)]      # gone 6 frames
    seen = _run(ByteTracker(cfg), long)
    assert [s.get(0) for s in seen[:5]] == [1] * 5
    assert seen[11] == {}                         # re-born: tentative on its first frame back
    assert [s.get(0) for s in seen[12:]] == [2] * 18


def test_ids_are_never_reused_after_a_track_ends() -> None:
    # Objects come and go in a fixed pattern; an id once lost for good must never come back, and
    # each new id is larger than every id before it.
    rng = np.random.default_rng(0)
    tracker = ByteTracker(ByteTrackConfig(track_buffer=3))
    alive = {k: bool(rng.integers(0, 2)) for k in range(6)}
    last_seen: dict[int, int] = {}
    for f in range(80):
        if f % 7 == 0:
            alive = {k: bool(rng.integers(0, 2)) for k in range(6)}
        dets = [_box(30 + 60 * k, 60 + f, 0.9) for k in range(6) if alive[k]]
        arr = np.array(dets, dtype=np.float64).reshape(-1, 5)
        out = tracker.update(arr[:, :4], arr[:, 4], np.zeros(len(arr)))
        for track_id in out.ids.tolist():
            if track_id in last_seen:
                assert f - last_seen[track_id] <= 4, f"id {track_id} came back after {f - last_seen[track_id]} frames"
            else:
                assert track_id > max(last_seen, default=0)
            last_seen[track_id] = f
    assert len(last_seen) > 6     # objects did end and restart, so new ids were handed out


def test_low_score_boxes_continue_a_track_but_never_start_one() -> None:
    frames = [[_box(50 + 3 * f, 80, 0.9 if f < 3 else 0.3), _box(200, 80, 0.3)] for f in range(8)]
    seen = _run(ByteTracker(), frames)
    assert all(s == {0: 1} for s in seen), seen   # object 1 (always 0.3) gets no track


def test_a_one_frame_false_positive_gets_no_id() -> None:
    frames = [[_box(50, 80)], [_box(50, 80), _box(200, 80, 0.95)], [_box(50, 80)], [_box(50, 80), _box(300, 80)],
              [_box(50, 80), _box(300, 80)]]
    seen = _run(ByteTracker(), frames)
    assert seen == [{0: 1}, {0: 1}, {0: 1}, {0: 1}, {0: 1, 1: 2}]


def test_reset_starts_ids_from_one() -> None:
    tracker = ByteTracker()
    _run(tracker, [[_box(50, 80), _box(150, 80)]] * 2)
    tracker.reset()
    assert _run(tracker, [[_box(300, 80)]]) == [{0: 1}]


def test_bad_settings_and_unknown_tracker_name_the_value() -> None:
    with pytest.raises(ConfigError, match=r"track_low_thresh=0.6 is above track_high_thresh=0.5"):
        ByteTrackConfig(track_low_thresh=0.6)
    with pytest.raises(ConfigError, match=r"track_buffer=-1"):
        ByteTrackConfig(track_buffer=-1)
    with pytest.raises(ConfigError, match=r"tracker='bytetrak'.*did you mean 'bytetrack'"):
        get_tracker("bytetrak")
    assert get_tracker("ByteTrack").config is ByteTrackConfig
