"""``model.track``: per-source trackers, persistence, options, saving, and the acceptance test
on a synthetic video of moving shapes (written and decoded with PyAV when it is installed)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from libreyolo_models import LibreYOLO9, Results
from libreyolo_models.errors import ConfigError
from libreyolo_models.settings import PredictConfig
from libreyolo_models.tasks.results import Boxes
from libreyolo_models.track import runner

NAMES = {0: "red", 1: "green", 2: "blue", 3: "yellow"}
COLOURS = {0: (230, 30, 30), 1: (30, 230, 30), 2: (40, 40, 240), 3: (235, 235, 30)}


@pytest.fixture(scope="module")
def model() -> LibreYOLO9:
    torch.manual_seed(0)
    return LibreYOLO9(size="t", nc=4, names=list(NAMES.values()), imgsz=64)


_REAL_PREDICT_STREAM = runner.predict_stream


def _result(boxes: list[tuple[float, ...]], source: str, frame: int | None, shape=(120, 160)) -> Results:
    """A Results as the streaming predict makes it: rows x1, y1, x2, y2, score, class."""
    data = torch.tensor(boxes, dtype=torch.float32).reshape(-1, 6)
    res = Results(np.zeros((*shape, 3), np.uint8), source if frame is None else f"{source}#{frame}", dict(NAMES),
                  boxes=Boxes(data, shape))
    res.source, res.frame = source, frame   # fields of the streaming predict's Results
    return res


@pytest.fixture(autouse=True)
def _undo_fakes() -> Iterator[None]:
    yield
    runner.predict_stream = _REAL_PREDICT_STREAM


def _fake_predict(model, make: callable, calls: list[dict]) -> None:
    """Replace the streaming predict that tracking reads (``track.runner.predict_stream``, the
    predict job on the model's handle) by a stub: ``make(source)`` yields the Results."""
    def predict_stream(handle, source, options):
        assert handle is model.handle  # tracking runs the predict job on this model's handle
        calls.append(dict(options, stream=True))
        return iter(make(source))
    runner.predict_stream = predict_stream


def _moving(source: str, n: int, frame_ids: bool = True) -> Iterator[Results]:
    for f in range(n):
        yield _result([(10 + 4 * f, 20, 40 + 4 * f, 60, 0.9, 0), (120 - 4 * f, 60, 150 - 4 * f, 100, 0.8, 1)],
                      source, f if frame_ids else None)


def test_track_gives_stable_ids_and_resets_per_source(model, monkeypatch) -> None:
    calls: list[dict] = []
    _fake_predict(model, lambda src: (r for s in src for r in _moving(s, 4)), calls)
    out = model.track(["a.mp4", "b.mp4"])
    assert len(out) == 8
    assert [r.boxes.id.tolist() for r in out] == [[1, 2]] * 8       # b.mp4 starts again from id 1
    assert all(r.boxes.id.dtype == torch.int64 for r in out)
    assert calls[0]["stream"] is True and calls[0]["conf"] == 0.1 and calls[0]["save"] is False
    assert out[-1].trails[1].shape == (4, 2)                          # four centres of b.mp4's object 1
    assert out[-1].to_list()[0]["track_id"] == 1


def test_a_stream_generator_keeps_state_and_persist_continues_it(model) -> None:
    calls: list[dict] = []
    _fake_predict(model, lambda src: _moving(src, 3, frame_ids=False), calls)
    gen = model.track("frames", stream=True)
    assert isinstance(gen, Iterator)
    first = next(gen)
    assert first.boxes.id.tolist() == [1, 2]
    assert [r.boxes.id.tolist() for r in gen] == [[1, 2], [1, 2]]
    # persist=True: the next call continues the same tracks (a user's own frame loop) ...
    _fake_predict(model, lambda src: (_result([(22, 20, 52, 60, 0.9, 0)], src, None),), calls)
    assert model.track("next", persist=True)[0].boxes.id.tolist() == [1]
    # ... an object far from every track is new: tentative (no id) on a running tracker's frame,
    # confirmed at once (id 1) on a fresh tracker's first frame, which is what persist=False gives.
    _fake_predict(model, lambda src: (_result([(300, 20, 330, 60, 0.9, 0)], src, None),), calls)
    assert model.track("other", persist=True)[0].boxes.id.tolist() == []
    assert model.track("other")[0].boxes.id.tolist() == [1]


def test_tracker_options_reach_the_tracker_and_conf_filters_the_output(model) -> None:
    calls: list[dict] = []
    boxes = [(10, 20, 40, 60, 0.9, 0), (100, 20, 130, 60, 0.7, 1)]
    _fake_predict(model, lambda src: (_result(boxes, src, f) for f in range(3)), calls)
    out = model.track("v.mp4", conf=0.8, track_low_thresh=0.2, track_buffer=3)
    assert calls[-1]["conf"] == 0.2
    assert model.track_session.config.track_buffer == 3
    assert [r.boxes.id.tolist() for r in out] == [[1]] * 3 and (out[0].boxes.conf >= 0.8).all()


def test_bad_track_calls_fail_at_the_call_with_the_fix(model) -> None:
    with pytest.raises(ConfigError, match=r"unknown option 'track_bufer'.*did you mean 'track_buffer'"):
        model.track("x.mp4", track_bufer=3, stream=True)
    with pytest.raises(ConfigError, match=r"tracker='sort'"):
        model.track("x.mp4", tracker="sort")
    with pytest.raises(ConfigError, match=r"track_low_thresh=0.7 is above"):
        model.track("x.mp4", track_low_thresh=0.7)
    from libreyolo_models import LibreYOLO

    with pytest.raises(ConfigError, match=r"task is 'semantic'; use a detect model"):
        LibreYOLO("LibreSegFormerb0.yaml").track("x.mp4")


@pytest.fixture(scope="module")
def lifted() -> LibreYOLO9:
    return _lifted_model()


def _lifted_model() -> LibreYOLO9:
    """A real, untrained model whose head is lifted so every frame has confident boxes."""
    torch.manual_seed(0)
    m = LibreYOLO9(size="t", nc=3, names=["circle", "square", "triangle"], imgsz=64)
    with torch.no_grad():  # an untrained head scores everything near zero; lift it so there are boxes
        for seq in m.net.head.cv3:
            seq[-1].bias.copy_(torch.tensor([0.3, 0.7, 0.2]))
    return m


def test_real_model_tracks_a_repeated_frame_with_the_same_ids(lifted) -> None:
    """Smoke run of the real predict path: the same frame three times gives the same tracks."""
    frame = np.random.default_rng(0).integers(0, 255, (64, 80, 3), dtype=np.uint8)
    out = lifted.track([frame, frame, frame], max_det=10, device="cpu")
    ids = [r.boxes.id.tolist() for r in out]
    assert len(ids[0]) > 0 and ids[0] == sorted(set(ids[0]))
    assert sorted(ids[1]) == sorted(ids[2]) == sorted(ids[0])
    assert all(len(r.boxes.id) == len(r.boxes) for r in out)


# ----------------------------------------------------------------- the acceptance test (video)
def _shape_positions(f: int) -> dict[int, tuple[int, int]]:
    """Top-left corners of the 12x12 squares in frame ``f``: red and green cross the frame on
    their own rows, blue leaves for good at frame 8, yellow enters at frame 16."""
    where = {0: (4 + 4 * f, 6), 1: (140 - 4 * f, 30)}
    if f < 8:
        where[2] = (60, 54 + f)
    if f >= 16:
        where[3] = (100, 80 - f)
    return where


def _write_video(path: Path, n: int) -> None:
    av = pytest.importorskip("av", reason="PyAV (the [video] extra) writes and reads the synthetic video")
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("mpeg4", rate=10)
        stream.width, stream.height, stream.pix_fmt = 160, 96, "yuv420p"
        stream.bit_rate = 2_000_000
        for f in range(n):
            img = np.zeros((96, 160, 3), np.uint8)
            for cls, (x, y) in _shape_positions(f).items():
                img[y:y + 12, x:x + 12] = COLOURS[cls]
            for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def _colour_detector(source: str) -> Iterator[Results]:
    """A detector we can trust: decode each frame and box every pixel near a shape's colour."""
    import av

    with av.open(source) as container:
        for f, frame in enumerate(container.decode(video=0)):
            img = frame.to_ndarray(format="rgb24")
            rows = []
            for cls, colour in COLOURS.items():
                ys, xs = np.nonzero(np.abs(img.astype(int) - colour).max(axis=2) < 60)
                if len(xs) > 20:
                    rows.append((xs.min(), ys.min(), xs.max() + 1, ys.max() + 1, 0.9, cls))
            res = _result(rows, source, f, shape=img.shape[:2])
            res.orig_img = img
            yield res


def test_every_shape_keeps_one_id_and_ids_are_not_reused_in_a_video(model, tmp_path) -> None:
    video = tmp_path / "shapes.mp4"
    _write_video(video, 28)
    _fake_predict(model, _colour_detector, [])
    out = model.track(str(video), stream=True, track_buffer=4, save=True, project=str(tmp_path), name="run")
    ids_per_class: dict[int, set[int]] = {}
    frames_seen = 0
    for f, res in enumerate(out):
        frames_seen += 1
        truth = _shape_positions(f)
        got = dict(zip(res.boxes.cls.int().tolist(), res.boxes.id.tolist()))
        # every shape is tracked in every frame (yellow from its second frame: tentative at birth)
        assert set(got) == set(truth) - ({3} if f == 16 else set()), (f, got)
        for cls, track_id in got.items():
            ids_per_class.setdefault(cls, set()).add(track_id)
    assert frames_seen == 28
    assert ids_per_class == {0: {1}, 1: {2}, 2: {3}, 3: {4}}     # one id each; yellow's is new
    assert _count_frames(tmp_path / "run" / "shapes.mp4") == 28


def _count_frames(path: Path) -> int:
    import av

    with av.open(str(path)) as container:
        return sum(1 for _ in container.decode(video=0))


def test_real_predict_tracks_video_files_per_source(lifted, tmp_path) -> None:
    """End to end through predict's own video decoding (the streaming predict): the same clip
    twice in one call is two sequences, each starting from id 1, saved as two videos."""
    pytest.importorskip("av", reason="PyAV (the [video] extra) writes and reads the video")
    if "vid_stride" not in {f.name for f in dataclasses.fields(PredictConfig)}:
        pytest.skip("predict does not read video files yet (needs the streaming predict: stream=True, vid_stride)")
    video = tmp_path / "clip.mp4"
    _write_video(video, 6)
    out = lifted.track([str(video), str(video)], device="cpu", max_det=10, save=True, project=str(tmp_path))
    assert [r.frame for r in out] == list(range(6)) * 2
    ids = [r.boxes.id.tolist() for r in out]
    assert ids[0] and ids[6] == ids[0] and min(ids[6]) == 1
    assert sorted(p.name for p in (tmp_path / "exp").iterdir()) == ["clip-1.mp4", "clip.mp4"]
    assert _count_frames(tmp_path / "exp" / "clip-1.mp4") == 6
    strided = lifted.track(str(video), stream=True, device="cpu", vid_stride=2)
    assert [r.frame for r in strided] == [0, 2, 4]


@pytest.mark.cuda
def test_tracking_on_the_gpu_with_graphs_matches_the_cpu(monkeypatch) -> None:
    """Predict on cuda:0, eager then CUDA-graphed, tracks like the CPU.

    The lifted head scores every anchor about the same, so which near-tied boxes survive NMS can
    differ between devices by rounding: the CPU comparison is therefore per frame (same number of
    tracks up to one, each frame keeping the first frame's ids). The graphed run replays the eager
    one bit for bit, so on the GPU the two must agree exactly.
    """
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    frames = [np.random.default_rng(0).integers(0, 255, (64, 80, 3), dtype=np.uint8)] * 3
    cpu = _lifted_model().track(frames, max_det=10, device="cpu")
    runs = {graph: _lifted_model().track(frames, max_det=10, device="cuda:0", cuda_graph=graph)
            for graph in (False, True)}
    for gpu in runs.values():
        ids = [sorted(r.boxes.id.tolist()) for r in gpu]
        assert ids[0] and ids[1] == ids[2] == ids[0]
        assert abs(len(ids[0]) - len(cpu[0].boxes)) <= 1
    for eager, graphed in zip(runs[False], runs[True]):
        assert eager.boxes.id.tolist() == graphed.boxes.id.tolist()
        assert torch.equal(eager.boxes.xyxy, graphed.boxes.xyxy)


def test_plot_draws_each_trail_and_box_in_its_id_colour() -> None:
    from libreyolo_models.tasks.drawing import class_color

    data = torch.tensor([[100.0, 40, 140, 80, 0.9, 0]])
    res = Results(np.zeros((120, 160, 3), np.uint8), "x.jpg", dict(NAMES), boxes=Boxes(data, (120, 160), id=torch.tensor([7])))
    res.trails = {7: np.array([[20.0, 100.0], [120.0, 100.0]], dtype=np.float32)}   # a horizontal trail
    image = res.plot(labels=False)
    assert tuple(image[100, 60]) == class_color(7)          # on the trail
    assert tuple(image[60, 100]) == class_color(7)          # on the box's left edge: the id's colour,
    assert class_color(7) != class_color(0)                 # not the class's
    assert res.to_list()[0]["track_id"] == 7
    with pytest.raises(ValueError, match="2 boxes but track ids of shape \\(1,\\)"):
        Boxes(torch.zeros(2, 6), (10, 10), id=torch.tensor([1]))
