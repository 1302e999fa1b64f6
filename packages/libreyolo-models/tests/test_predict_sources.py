"""Predict over many inputs: an unreadable item is named and skipped, the good ones come back;
one input alone that cannot be read is an error naming it; names never collide on save."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from libreyolo_models import ConfigError, LibreYOLO9, SourceError

IMGSZ = 64


@pytest.fixture(scope="module")
def model() -> LibreYOLO9:
    torch.manual_seed(0)
    return LibreYOLO9(size="t", nc=5, imgsz=IMGSZ)


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    for name in ("a.png", "b.jpg", "c.png"):
        Image.fromarray(rng.integers(0, 255, (40, 48, 3), dtype=np.uint8)).save(tmp_path / name)
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8\xff not really a jpeg")
    return tmp_path


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


@pytest.mark.parametrize("kind", ["folder", "glob", "list", "stream"])
def test_an_unreadable_item_is_named_and_skipped_and_the_rest_predicted(
        model: LibreYOLO9, folder: Path, caplog: pytest.LogCaptureFixture, kind: str) -> None:
    files = sorted(folder.iterdir())
    source = {"folder": folder, "glob": str(folder / "*"), "list": files, "stream": (f for f in files)}[kind]
    with caplog.at_level(logging.WARNING):
        results = model(source, conf=0.5)
    assert [Path(r.path).name for r in results] == ["a.png", "b.jpg", "c.png"]
    assert [(Path(n).name, "not an image PIL can identify" in why) for n, why in results.skipped] == [
        ("broken.jpg", True)]
    assert any(f"skipped {folder / 'broken.jpg'}: not an image PIL can identify" in w for w in _warnings(caplog))


def test_items_of_every_kind_in_a_list_are_skipped_alike(model: LibreYOLO9, folder: Path) -> None:
    good = np.zeros((20, 20, 3), np.uint8)
    results = model([good, folder / "missing.jpg", np.zeros((3, 20, 20), np.uint8), "http://127.0.0.1:9/y.jpg",
                     folder / "clip.mp4", 4.2, folder / "a.png"], conf=0.5)
    assert [r.path for r in results] == ["source[0].jpg", str(folder / "a.png")]
    reasons = dict(results.skipped)
    assert "does not exist" in reasons["source[1]"]
    assert "channels-first" in reasons["source[2]"]
    assert "unreachable" in reasons["source[3]"]  # URLs and videos are sources now (predict.streams)
    assert "does not exist" in reasons["source[4]"]
    assert "unsupported source type float" in reasons["source[5]"]


def test_a_collection_with_nothing_readable_is_an_error_naming_the_first(model: LibreYOLO9, tmp_path: Path) -> None:
    (tmp_path / "x.jpg").write_bytes(b"junk")
    with pytest.raises(SourceError, match=r"none of the 1 images in .* could be read \(first: .*x.jpg"):
        model(tmp_path)
    with pytest.raises(SourceError, match=r"none of the 2 inputs could be read \(first: .*x.jpg"):
        model([tmp_path / "x.jpg", tmp_path / "y.jpg"])


@pytest.mark.parametrize(("source", "match"), [
    ("", r"source='' is empty"),
    ("   ", r"is empty"),
    ("http://127.0.0.1:9/a.jpg", r"http://127.0.0.1:9/a.jpg: unreachable"),
    ("clip.mp4", r"video 'clip.mp4' does not exist"),
    ("~/no-such-image-here.jpg", "does not exist"),
])
def test_one_bad_input_alone_is_an_error_naming_it(model: LibreYOLO9, source: str, match: str) -> None:
    with pytest.raises(SourceError, match=match):
        model(source)


def test_empty_string_does_not_predict_the_working_directory(model: LibreYOLO9, folder: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(folder)  # a folder full of images: "" must not mean "here"
    with pytest.raises(SourceError, match="is empty"):
        model("")


def test_tilde_is_expanded_in_paths(model: LibreYOLO9, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(folder))
    (res,) = model("~/a.png", conf=0.5)
    assert res.path == str(folder / "a.png")
    saved = res.save("~/out/a.jpg")
    assert saved == folder / "out" / "a.jpg" and saved.is_file()


def test_saved_predictions_of_inputs_sharing_a_name_do_not_overwrite(model: LibreYOLO9, tmp_path: Path) -> None:
    for sub in ("x", "y"):
        (tmp_path / sub).mkdir()
        Image.new("RGB", (32, 32), (10, 20, 30)).save(tmp_path / sub / "frame.png")
    results = model([tmp_path / "x" / "frame.png", tmp_path / "y" / "frame.png"], save=True,
                    project=str(tmp_path / "runs"), name="p")
    assert len(results) == 2
    assert sorted(p.name for p in (tmp_path / "runs" / "p").iterdir()) == ["frame.jpg", "frame_2.jpg"]


def test_a_class_filter_outside_the_model_is_an_error(model: LibreYOLO9) -> None:
    with pytest.raises(ConfigError, match=r"classes=\[99\]: class id 99 is not one of this model's 5 classes"):
        model(np.zeros((32, 32, 3), np.uint8), classes=[99])


def test_a_folder_decodes_on_several_threads_in_order_with_bad_files_in_place(tmp_path: Path) -> None:
    """Folders decode a few files ahead on a pool; the order, the pixels and the bad-file reports
    are the single-threaded ones, and closing early leaves no work waiting."""
    import threading

    from libreyolo_models.data.decode import ImageDecodeError, read_image_file
    from libreyolo_models.predict.sources import decoded_in_order

    paths = []
    for i in range(11):
        path = tmp_path / f"{i:02d}.png"
        if i in (3, 7):
            path.write_bytes(b"not an image")
        else:
            Image.fromarray(np.full((8 + i, 9, 3), i * 20, np.uint8)).save(path)
        paths.append(path)
    got = list(decoded_in_order(paths, threads=3))
    assert [p for p, _ in got] == paths
    for path, decoded in got:
        if path.name in ("03.png", "07.png"):
            assert isinstance(decoded, ImageDecodeError) and decoded.name == str(path)
        else:
            assert np.array_equal(decoded, read_image_file(path)[0])
    early = decoded_in_order(paths, threads=3)
    next(early)
    early.close()  # cancels what has not started; the running decodes finish on their own
    import time

    deadline = time.monotonic() + 10
    while any(t.name.startswith("libreyolo-decode") for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(t.name.startswith("libreyolo-decode") for t in threading.enumerate())


def test_a_folder_file_that_never_finishes_decoding_is_skipped_after_the_timeout(tmp_path: Path, monkeypatch) -> None:
    """Folders and lists share one decode pool (``decode_in_order``); a decode stuck on a stalled
    drive is reported as unreadable after ``DECODE_TIMEOUT_S`` and the rest still arrive."""
    import threading

    from libreyolo_models.predict import sources, streams

    paths = []
    for i in range(4):
        path = tmp_path / f"{i}.png"
        Image.fromarray(np.full((8, 9, 3), 40 * i, np.uint8)).save(path)
        paths.append(path)
    release = threading.Event()
    read = streams._read_or_error

    def stalls_on_the_second(path, shrink_to=None, resize=True):
        if path == paths[1]:
            release.wait(10)
        return read(path, shrink_to, resize)

    monkeypatch.setattr(sources, "DECODE_TIMEOUT_S", 0.3)
    monkeypatch.setattr(streams, "_read_or_error", stalls_on_the_second)
    report = sources.SourceReport()
    try:
        frames = list(streams.decode_files(list(paths), workers=2, report=report))
    finally:
        release.set()
    assert [f.name for f in frames] == [str(p) for p in (paths[0], paths[2], paths[3])]
    assert report.skipped == [(str(paths[1]), report.skipped[0][1])] and "decoding took over" in report.skipped[0][1]


def test_a_decode_stuck_on_a_fifo_never_blocks_interpreter_exit(tmp_path: Path) -> None:
    """A read that never returns (a FIFO with no writer: a hung network drive behaves alike) is
    given up on after the timeout, and the process still exits: its thread is a daemon."""
    import os
    import subprocess
    import sys
    import textwrap

    fifo = tmp_path / "stuck.jpg"
    os.mkfifo(fifo)
    good = tmp_path / "good.png"
    Image.fromarray(np.full((8, 9, 3), 90, np.uint8)).save(good)
    script = textwrap.dedent(f"""
        from libreyolo_models.predict import sources
        sources.DECODE_TIMEOUT_S = 0.5
        for threads in (None, 1):
            got = list(sources.decoded_in_order([{str(fifo)!r}, {str(good)!r}], threads=threads))
            print([type(d).__name__ for _, d in got], flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env=os.environ.copy())
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:2] == ["['ImageDecodeError', 'ndarray']"] * 2
