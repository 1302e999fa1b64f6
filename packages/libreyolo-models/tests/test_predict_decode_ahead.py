"""A video file's frames decode on a thread of their own on CUDA (``predictor.DECODE_AHEAD``):
the frames arrive in order and from that thread, closing early closes the video, an error
reaches the consumer where it happened (after a batch of the frames decoded before it), and only
one video file on a pinning (CUDA) predictor with batches of more than one frame takes that path. The CUDA predict tests of video run through
it end to end (``test_predict_planar``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace

import numpy as np
import pytest

from libreyolo_models.predict import predictor
from libreyolo_models.predict.predictor import Predictor, _batches
from libreyolo_models.predict.prefetch import Prefetcher
from libreyolo_models.predict.staging import host_tensors
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


class HostStaging:
    """Stands in for the pinned ring on the CPU: ``_batches`` stages through it as on CUDA."""

    def __init__(self) -> None:
        self.staged: list[int] = []

    def stage(self, images):  # noqa: ANN001, ANN201
        self.staged.append(len(images))
        return host_tensors(list(images)), None


@pytest.mark.parametrize("ahead_on", [True, False], ids=["decode-ahead", "one-thread"])
def test_through_the_batching_thread_every_frame_before_an_error_is_delivered(ahead_on: bool) -> None:
    """As ``Predictor.stream`` chains them (decoding thread, then the batching and pinning thread):
    batches in order, the last one partial, and with an error at frame 9 the frames 8 before it
    still arrive in a batch of their own before the error (they were dropped before)."""
    staging = HostStaging()
    log: dict[str, object] = {}
    plan = SourcePlan(frames(11, log), is_live=False, one_video=ahead_on)
    got = [[f.frame for f in batch.frames] for batch in Prefetcher(_batches(ahead(plan), 4, staging=staging))]
    assert got == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10]] and staging.staged == [4, 4, 3] and log["closed"]
    log = {}
    plan = SourcePlan(frames(11, log, fail_at=9), is_live=False, one_video=ahead_on)
    got = []
    with pytest.raises(RuntimeError, match="corrupt packet at frame 9"):
        for batch in Prefetcher(_batches(ahead(plan), 4, staging=staging)):
            got.append([f.frame for f in batch.frames])
    assert got == [[0, 1, 2, 3], [4, 5, 6, 7], [8]] and log["closed"]


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
