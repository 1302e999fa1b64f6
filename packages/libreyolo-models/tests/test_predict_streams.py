"""The stream API: lazy results with source and frame, videos, URLs, bad sources, device default."""

from __future__ import annotations

import http.server
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from libreyolo_models import LibreYOLO9, SourceError
from libreyolo_models.errors import ConfigError
from libreyolo_models.predict.prefetch import Prefetcher

av = pytest.importorskip("av")

IMGSZ = 64
N_FRAMES = 16


@pytest.fixture(scope="module")
def model() -> LibreYOLO9:
    torch.manual_seed(0)
    m = LibreYOLO9(size="t", nc=3, names=["circle", "square", "triangle"], imgsz=IMGSZ, device="cpu")
    with torch.no_grad():
        for seq in m.net.head.cv3:
            seq[-1].bias.copy_(torch.tensor([0.3, 0.7, 0.2]))
    return m


def write_video(path: Path, n: int = N_FRAMES, size: tuple[int, int] = (48, 64)) -> Path:
    """A tiny test video: a bright square moving across a dark frame, one position per frame."""
    h, w = size
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("mpeg4", rate=10)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        for i in range(n):
            img = np.full((h, w, 3), 30, dtype=np.uint8)
            img[10:26, 2 + 2 * i:18 + 2 * i] = 220
            for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


@pytest.fixture(scope="module")
def video(tmp_path_factory) -> Path:
    return write_video(tmp_path_factory.mktemp("video") / "clip.mp4")


def test_stream_true_yields_results_lazily_with_source_and_frame(model, video) -> None:
    results = model(video, stream=True, batch=4, conf=0.3)
    assert isinstance(results, types.GeneratorType)
    first = next(results)
    assert (first.source, first.frame, first.orig_shape, first.fps) == (str(video), 0, (48, 64), 10.0)
    rest = list(results)
    assert [r.frame for r in [first, *rest]] == list(range(N_FRAMES))
    assert set(first.speed) == {"decode", "preprocess", "inference", "postprocess"}


def test_vid_stride_keeps_every_nth_frame_and_batches_agree(model, video) -> None:
    strided = model(video, vid_stride=3, batch=4, conf=0.3)
    assert isinstance(strided, list)
    assert [r.frame for r in strided] == [0, 3, 6, 9, 12, 15]
    one_by_one = model(video, vid_stride=3, batch=1, conf=0.3)
    for a, b in zip(strided, one_by_one):
        assert torch.allclose(a.boxes.data, b.boxes.data, atol=1e-3)


def test_still_images_have_no_frame_index_and_lists_mix_with_videos(model, video, tmp_path) -> None:
    image = tmp_path / "still.png"
    Image.fromarray(np.full((40, 30, 3), 90, dtype=np.uint8)).save(image)
    results = model([image, video, np.zeros((20, 20, 3), np.uint8)], vid_stride=8)
    assert [(r.source, r.frame) for r in results] == [(str(image), None), (str(video), 0), (str(video), 8),
                                                     ("source[2].jpg", None)]


def test_save_on_a_video_writes_an_annotated_video(model, video, tmp_path) -> None:
    model(video, save=True, project=str(tmp_path), name="run", conf=0.3)
    out = tmp_path / "run" / "clip.mp4"
    with av.open(str(out)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    assert len(frames) == N_FRAMES and frames[0].shape == (48, 64, 3)


@pytest.fixture(scope="module")
def http_root(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("www")

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", root
    server.shutdown()
    server.server_close()


def test_image_url_is_downloaded_and_named(model, http_root) -> None:
    base, root = http_root
    pixels = np.random.default_rng(1).integers(0, 255, (30, 50, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(root / "pic.png")
    (res,) = model(f"{base}/pic.png")
    assert res.source == f"{base}/pic.png" and res.frame is None
    assert np.array_equal(res.orig_img, pixels)


def test_video_url_is_streamed(model, http_root, video) -> None:
    base, root = http_root
    (root / "clip.mp4").write_bytes(video.read_bytes())
    frames = [r.frame for r in model(f"{base}/clip.mp4", stream=True, vid_stride=5)]
    assert frames == [0, 5, 10, 15]


def test_url_404_names_the_url_and_status(model, http_root) -> None:
    base, _ = http_root
    with pytest.raises(SourceError, match=rf"{base}/missing.png.*HTTP 404"):
        model(f"{base}/missing.png")


def _zero_pixel_png() -> bytes:
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 0, 5, 8, 2, 0, 0, 0)  # width 0, height 5, RGB
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")


@pytest.mark.parametrize("kind", ["missing", "garbage", "zero-pixel", "zero-pixel-file", "camera"])
def test_bad_sources_give_one_error_naming_them(model, tmp_path, kind) -> None:
    if kind == "missing":
        source: object = str(tmp_path / "nowhere.mp4")
        match = "nowhere.mp4.*does not exist"
    elif kind == "garbage":
        source = tmp_path / "broken.mkv"
        source.write_bytes(b"\x00not a video at all" * 50)
        match = "broken.mkv"
    elif kind == "zero-pixel-file":
        source = tmp_path / "empty.png"
        source.write_bytes(_zero_pixel_png())
        match = "empty.png"
    elif kind == "zero-pixel":
        source = np.zeros((0, 5, 3), dtype=np.uint8)
        match = r"shape \(0, 5, 3\)"
    else:
        source, match = 97, "97"
    with pytest.raises(SourceError, match=match):
        list(model(source, stream=True))


def test_a_live_source_needs_stream_true(model) -> None:
    with pytest.raises(ConfigError, match="stream=True"):
        model("rtsp://127.0.0.1:9/live")
    with pytest.raises(ConfigError, match="vid_stride=0"):
        model("x.mp4", vid_stride=0)


def test_prefetch_runs_a_bounded_distance_ahead_and_stops_when_closed() -> None:
    produced: list[int] = []
    closed = threading.Event()

    def numbers() -> Iterator[int]:
        try:
            for i in range(1000):
                produced.append(i)
                yield i
        finally:
            closed.set()

    it = iter(Prefetcher(numbers(), depth=2))
    assert next(it) == 0
    time.sleep(0.3)
    assert len(produced) <= 4  # one handed out, two queued, one waiting to be put
    it.close()  # type: ignore[attr-defined]
    assert closed.wait(2.0)


def test_prefetch_hands_the_producers_error_to_the_consumer() -> None:
    def failing() -> Iterator[int]:
        yield 1
        raise SourceError("frame 2 of cam: broken")

    it = iter(Prefetcher(failing()))
    assert next(it) == 1
    with pytest.raises(SourceError, match="frame 2 of cam"):
        next(it)


@pytest.mark.cuda
def test_gpu_stream_with_graphs_and_half_matches_eager(video) -> None:
    torch.manual_seed(0)
    m = LibreYOLO9(size="t", nc=3, imgsz=IMGSZ)
    with torch.no_grad():
        for seq in m.net.head.cv3:
            seq[-1].bias.copy_(torch.tensor([0.3, 0.7, 0.2]))
    eager = list(m(video, stream=True, batch=4, conf=0.3, device=0))
    graphed = list(m(video, stream=True, batch=4, conf=0.3, cuda_graph=True))
    assert m.graph_info()["graphs"], "no graph was captured"
    assert [r.frame for r in graphed] == list(range(N_FRAMES))
    for a, b in zip(eager, graphed):
        assert a.boxes.data.device.type == "cpu"
        assert torch.equal(a.boxes.data, b.boxes.data)
    half = list(m(video, stream=True, batch=4, conf=0.3, half=True, fuse=True, cuda_graph=True))
    assert sum(len(r) for r in half) == pytest.approx(sum(len(r) for r in eager), rel=0.2)


def test_folder_files_decode_in_parallel_but_arrive_in_order(model, tmp_path) -> None:
    from libreyolo_models.predict.streams import decode_files

    paths = []
    for i in range(12):
        paths.append(tmp_path / f"im{i:02d}.png")
        Image.fromarray(np.full((8 + i, 10, 3), i, dtype=np.uint8)).save(paths[-1])
    frames = list(decode_files(paths, workers=3))
    assert [f.source for f in frames] == [str(p) for p in paths]
    assert [int(f.image[0, 0, 0]) for f in frames] == list(range(12))
    results = model(tmp_path, batch=5)
    assert [r.source for r in results] == [str(p) for p in paths]
    gen = decode_files(paths, workers=2)
    next(gen)
    gen.close()  # cancels what was queued; returns once the running decodes end


def test_the_first_batch_decodes_on_the_callers_thread_and_the_rest_ahead_of_it(model, tmp_path, monkeypatch) -> None:
    from libreyolo_models.predict import streams

    path = tmp_path / "one.png"
    Image.fromarray(np.full((40, 56, 3), 90, np.uint8)).save(path)
    decoded_on: list[str] = []
    read, still = streams.read_image_for, streams.iter_sources

    def reading(p, imgsz, **kwargs):  # noqa: ANN001, ANN003, ANN202
        decoded_on.append(threading.current_thread().name)
        return read(p, imgsz, **kwargs)

    def arrays(source, report):  # noqa: ANN001, ANN202
        for item in still(source, report):
            decoded_on.append(threading.current_thread().name)
            yield item

    monkeypatch.setattr(streams, "read_image_for", reading)  # predict reads files for its letterbox
    monkeypatch.setattr(streams, "iter_sources", arrays)
    starts: list[int] = []
    start = Prefetcher.start
    monkeypatch.setattr(Prefetcher, "start", lambda self: starts.append(1) or start(self))
    here = threading.current_thread().name
    assert len(model(str(path))) == 1 and decoded_on == [here]  # one image: no thread hop for its decode
    assert starts == []  # a one-batch source starts no thread at all
    decoded_on.clear()
    images = [np.full((40, 56, 3), 40 * i, np.uint8) for i in range(3)]
    results = model(images, batch=1)
    assert len(results) == 3 and len(decoded_on) == 3
    assert decoded_on[0] == here and here not in decoded_on[1:]  # the rest on the prefetch thread


def test_predict_puts_a_network_in_eval_mode_only_when_some_module_is_training(model, monkeypatch) -> None:
    from libreyolo_models.predict.predictor import ensure_eval

    net = model.net
    net.eval()
    calls = []
    monkeypatch.setattr(net, "eval", lambda: calls.append(1) or net)
    ensure_eval(net)
    assert calls == []  # every flag already off: nothing assigned
    monkeypatch.undo()
    net.head.cv3[0].train()  # one training submodule would use batch statistics
    ensure_eval(net)
    assert not any(m.training for m in net.modules())

