"""Folders decoded by worker processes (``predict.decode_procs``): the threads' results, in order,
through shared memory; bounded waits, a dead worker, early close; when processes are used."""

from __future__ import annotations

import logging
import multiprocessing
import os
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from torch.utils.data import get_worker_info

from libreyolo_models.data.decode import ImageDecodeError
from libreyolo_models.data.image_files import ShrunkImage
from libreyolo_models.predict import decode_procs, sources, streams
from libreyolo_models.predict.gpu_jpeg import EncodedJpeg
from libreyolo_models.predict.sources import SourceReport

BAD = 4  # the unreadable file of _folder


def _folder(tmp_path: Path, n: int = 11) -> list[Path]:
    """PNGs of a few sizes, and JPEGs large enough to decode at a reduced scale (with file bytes)."""
    rng = np.random.default_rng(0)
    paths = []
    for i in range(n):
        if i % 3 == 2:
            path = tmp_path / f"{i:02d}.jpg"
            Image.fromarray(rng.integers(0, 255, (120, 200, 3), np.uint8)).save(path, quality=80)
        else:
            path = tmp_path / f"{i:02d}.png"
            Image.fromarray(np.full((8 + i, 10 + 2 * i, 3), 20 * i, np.uint8)).save(path)
        paths.append(path)
    paths[BAD].write_bytes(b"not an image")
    return paths


def _same(a: object, b: object) -> bool:
    if isinstance(a, EncodedJpeg):
        return a == b
    if isinstance(a, ImageDecodeError):
        return isinstance(b, ImageDecodeError) and (a.name, a.reason) == (b.name, b.reason)
    if isinstance(a, ShrunkImage):
        return (isinstance(b, ShrunkImage) and np.array_equal(a.pixels, b.pixels) and a.orig_shape == b.orig_shape
                and a.name == b.name and a.data == b.data)
    return isinstance(b, np.ndarray) and np.array_equal(a, b)  # type: ignore[arg-type]


@pytest.mark.parametrize("slot_bytes", [decode_procs.SLOT_BYTES, 64])
@pytest.mark.parametrize("gpu_jpeg", [False, True])
def test_processes_give_the_threads_results_in_order(tmp_path: Path, monkeypatch, slot_bytes: int,
                                                     gpu_jpeg: bool) -> None:
    """Through the shared slots, and (slot too small) carried by pickle instead: the same results.
    With the device decoder on, JPEGs come back encoded (their bytes), the PNGs decoded."""
    monkeypatch.setattr(decode_procs, "SLOT_BYTES", slot_bytes)
    paths = _folder(tmp_path)
    if gpu_jpeg:
        encoded = streams._read_encoded_or_error
        read = lambda p: encoded(p, 100)  # noqa: E731 - forked, never pickled
    else:
        plain = streams._read_or_error
        read = lambda p: plain(p, 50)  # noqa: E731
    by_threads = list(sources.decode_in_order(paths, read, 2))
    by_processes = list(decode_procs.decode_in_processes(paths, read, 2, chunk=3))
    assert [p for p, _ in by_processes] == paths
    assert all(_same(a, b) for (_, a), (_, b) in zip(by_threads, by_processes))
    if gpu_jpeg:
        jpegs = [r for _, r in by_processes if isinstance(r, EncodedJpeg)]
        assert len(jpegs) == 3 and all(r.data == Path(r.name).read_bytes() and r.orig_shape == (120, 200)
                                       for r in jpegs)
    else:
        assert sum(isinstance(r, ShrunkImage) and r.data is not None for _, r in by_processes) == 3  # reduced JPEGs
    assert isinstance(by_processes[BAD][1], ImageDecodeError)
    assert all(r.flags.writeable for _, r in by_processes if isinstance(r, np.ndarray))  # private copies
    assert not multiprocessing.active_children()


def test_decode_files_with_processes_skips_the_unreadable_and_keeps_the_order(tmp_path: Path) -> None:
    paths = _folder(tmp_path)
    report = SourceReport()
    frames = list(streams.decode_files(list(paths), report=report, processes=2, shrink_to=50))
    assert [f.source for f in frames] == [str(p) for i, p in enumerate(paths) if i != BAD]
    assert [name for name, _ in report.skipped] == [str(paths[BAD])] and report.seen == len(paths)
    reduced = [f for f in frames if f.full is not None]
    assert reduced and all(f.full.full().shape == (120, 200, 3) for f in reduced)  # full picture from its bytes


def test_closing_early_stops_the_workers(tmp_path: Path) -> None:
    paths = _folder(tmp_path) * 4
    decoded = decode_procs.decode_in_processes(paths, streams._read_or_error, 2, chunk=2)
    next(decoded)
    assert multiprocessing.active_children()
    decoded.close()
    assert not multiprocessing.active_children()


def test_a_chunk_slower_than_the_timeout_is_skipped_and_decoding_goes_on(tmp_path: Path, monkeypatch) -> None:
    paths = _folder(tmp_path)
    read = streams._read_or_error

    def stalls_on_the_sixth(path):  # noqa: ANN001, ANN202
        if path == paths[6] and get_worker_info() is not None:
            time.sleep(5.0)  # past the timeout: the parent reports its chunk and starts afresh
        return read(path)

    # Two seconds: the fresh workers forked after the stall must deliver the next chunk within the
    # bound too, and one second was not always enough on a loaded two-core CI machine.
    monkeypatch.setattr(sources, "DECODE_TIMEOUT_S", 2.0)
    monkeypatch.setattr(decode_procs, "POLL_S", 0.25)
    started = time.perf_counter()
    got = list(decode_procs.decode_in_processes(paths, stalls_on_the_sixth, 2, chunk=2))
    assert time.perf_counter() - started < 20
    assert [p for p, _ in got] == paths
    slow = [p for p, r in got if isinstance(r, ImageDecodeError) and "decoding took over" in r.reason]
    assert slow == [paths[6], paths[7]]  # the sixth's chunk of two
    assert all(not isinstance(r, ImageDecodeError) for i, (_, r) in enumerate(got) if i not in (BAD, 6, 7))
    assert not multiprocessing.active_children()


def test_a_dead_worker_hands_the_rest_of_the_folder_to_threads(tmp_path: Path, caplog, monkeypatch) -> None:
    monkeypatch.setattr(decode_procs, "POLL_S", 0.5)
    paths = _folder(tmp_path)
    read = streams._read_or_error

    def crashes_on_the_seventh(path):  # noqa: ANN001, ANN202
        if path == paths[7] and get_worker_info() is not None:
            os._exit(3)  # a decoder crashing inside a worker
        return read(path)

    started = time.perf_counter()
    with caplog.at_level(logging.WARNING):
        got = list(decode_procs.decode_in_processes(paths, crashes_on_the_seventh, 2, chunk=2))
    assert time.perf_counter() - started < 15  # noticed at a poll, not at the decode timeout
    assert [p for p, _ in got] == paths
    assert sum(isinstance(r, ImageDecodeError) for _, r in got) == 1  # only the unreadable file
    assert "decoding process died" in caplog.text
    assert not multiprocessing.active_children()


def test_threads_by_default_and_processes_only_for_many_files_on_many_cores(monkeypatch) -> None:
    monkeypatch.setattr(decode_procs, "usable_cores", lambda: 16)
    assert decode_procs.decode_processes(1000) == 0  # off by default: photographs decode faster on threads
    monkeypatch.setattr(decode_procs, "MAX_DECODE_PROCESSES", 8)
    assert decode_procs.decode_processes(1000) == 4
    assert decode_procs.decode_processes(decode_procs.MIN_FILES - 1) == 0  # a few files: threads
    monkeypatch.setattr(decode_procs, "usable_cores", lambda: 64)
    assert decode_procs.decode_processes(1000) == decode_procs.MAX_DECODE_PROCESSES == 8
    monkeypatch.setattr(decode_procs, "usable_cores", lambda: 6)
    assert decode_procs.decode_processes(1000) == 2
    monkeypatch.setattr(decode_procs, "usable_cores", lambda: 2)
    assert decode_procs.decode_processes(1000) == 0
    monkeypatch.setattr(decode_procs, "MAX_DECODE_PROCESSES", 0)
    monkeypatch.setattr(decode_procs, "usable_cores", lambda: 16)
    assert decode_procs.decode_processes(1000) == 0
