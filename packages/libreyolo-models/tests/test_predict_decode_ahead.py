"""A video file's frames decode on a thread of their own on CUDA (``predictor.DECODE_AHEAD``):
the frames arrive in order and from that thread, closing early closes the video, an error
reaches the consumer where it happened, and only one video file on a pinning (CUDA) predictor
with batches of more than one frame takes that path. The CUDA predict tests of video run through
it end to end (``test_predict_planar``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace

import numpy as np
import pytest

from libreyolo_models.predict import predictor
from libreyolo_models.predict.predictor import Predictor
from libreyolo_models.predict.streams import Frame, SourcePlan, open_source


def frames(n: int, log: dict[str, object], fail_at: int | None = None) -> Iterator[Frame]:
    """``n`` tiny frames, noting the thread each was made on and whether the generator was closed."""
    log["threads"] = set()
    try:
        for i in range(n):
            if i == fail_at:
                raise RuntimeError(f"corrupt packet at frame {i}")
            log["threads"].add(threading.current_thread().name)  # type: ignore[union-attr]
            yield Frame(np.full((2, 2, 3), i, np.uint8), "clip.mp4", i, "clip.mp4")
    finally:
        log["closed"] = True


def ahead(plan: SourcePlan, *, staging: object = object(), batch: int = 4) -> Iterator[Frame]:
    """``Predictor._frames`` of a predictor that pins (CUDA) or not (``staging=None``)."""
    return Predictor._frames(SimpleNamespace(_staging=staging, cfg=SimpleNamespace(batch=batch)), plan)  # type: ignore[arg-type]


def test_one_video_decodes_on_its_own_thread_in_order() -> None:
    log: dict[str, object] = {}
    got = [f.frame for f in ahead(SourcePlan(frames(10, log), is_live=False, one_video=True))]
    assert got == list(range(10))
    assert log["threads"] == {"libreyolo-decode"} and log["closed"]


def test_closing_early_stops_the_thread_and_closes_the_video() -> None:
    log: dict[str, object] = {}
    it = ahead(SourcePlan(frames(1000, log), is_live=False, one_video=True), batch=2)
    assert [next(it).frame for _ in range(3)] == [0, 1, 2]
    it.close()  # type: ignore[attr-defined]
    deadline = time.monotonic() + 5
    while not log.get("closed") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert log.get("closed")
    assert not any(t.name == "libreyolo-decode" and t.is_alive() for t in threading.enumerate())


def test_a_decoding_error_reaches_the_consumer_after_the_frames_before_it() -> None:
    log: dict[str, object] = {}
    got = []
    with pytest.raises(RuntimeError, match="corrupt packet at frame 5"):
        for f in ahead(SourcePlan(frames(10, log, fail_at=5), is_live=False, one_video=True)):
            got.append(f.frame)
    assert got == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("case", ["cpu", "batch-1", "not-one-video", "switched-off"])
def test_other_sources_and_devices_decode_where_they_did(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    log: dict[str, object] = {}
    plan = SourcePlan(frames(3, log), is_live=False, one_video=case != "not-one-video")
    if case == "switched-off":
        monkeypatch.setattr(predictor, "DECODE_AHEAD", False)
    got = ahead(plan, staging=None if case == "cpu" else object(), batch=1 if case == "batch-1" else 4)
    assert got is plan.frames


def test_open_source_marks_one_video_file_only(tmp_path) -> None:
    video = tmp_path / "clip.mp4"
    video.write_bytes(b"")  # classified by name; nothing decodes until iterated
    image = tmp_path / "a.jpg"
    image.write_bytes(b"")
    assert open_source(str(video)).one_video
    assert not open_source([str(video)]).one_video  # a list may mix stills and videos
    assert not open_source(str(image)).one_video
    assert not open_source(np.zeros((4, 4, 3), np.uint8)).one_video
