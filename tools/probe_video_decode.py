#!/usr/bin/env python
"""Where a video's frames per second go on the host: decoding, and converting each frame for predict.

PyAV decodes on FFmpeg's own threads (``thread_type="AUTO"``, as ``predict.video`` does); off CUDA
predict then converts every kept frame to an RGB array (``VideoFrame.to_ndarray("rgb24")``,
FFmpeg's swscale on the calling thread), on CUDA it takes the planar yuv420p array and converts on
the GPU (``predict.planar``). This reads the frames per second of the decode alone, of the decode
with each of those, and with a conversion scaled to the letterbox in the same swscale pass, on the
bench's 1080p pan over a photograph (``predict_media.write_video``) or a video you name; and,
since predict's prefetch work read 424 frames/s where the decode alone read 899 (H200 machine),
what keeping decoded frames alive costs the decoder (predict holds each frame until its
``Results`` go: ``predict.planar``), with and without the copy of the planes into a batch buffer
(pinned on a CUDA machine). The arms take turns, ``--rounds`` times; the table gives the median.

    python tools/probe_video_decode.py --seconds 10 --out video-decode.md
    python tools/probe_video_decode.py --seconds 30 --predict     # and predict's own stages (GPU)

``--predict`` (CUDA) adds predict's stages on the same video, each alone: the prefetch thread's
work (decode, planes, the copy into pinned batch buffers: ``predict.predictor._batches``) on the
calling thread, then ``predict(stream=True)`` end to end, graphed, with the frames on the GPU and
with ``gpu_decode=False`` (RGB on the host), and its per-phase means: which stage sets the rate;
each also with the decoding on a thread of its own (``predictor.DECODE_AHEAD``) and without.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from predict_media import write_video
from report import add_row, emit_report, log


def frames_per_second(path: Path, convert: Callable[[Any], object], hold: int = 0) -> float:
    """Decode ``path`` as predict does, calling ``convert`` on every frame and keeping the last
    ``hold`` results alive (decoded frames, when ``convert`` returns them)."""
    import av

    container = av.open(str(path))
    kept: deque[object] = deque(maxlen=max(hold, 1))
    try:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        started, frames = time.perf_counter(), 0
        for frame in container.decode(stream):
            result = convert(frame)
            if hold:
                kept.append(result)
            frames += 1
        return frames / (time.perf_counter() - started)
    finally:
        container.close()


def batch_buffer(path: Path, batch: int, pinned: bool) -> Any:
    """A ``[batch, H * 3 / 2, W, 1]`` uint8 buffer for ``path``'s planes (``pinned``: page-locked)."""
    import av
    import torch

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        height, width = stream.codec_context.height, stream.codec_context.width
    return torch.empty(batch, height * 3 // 2, width, 1, dtype=torch.uint8, pin_memory=pinned)


def copy_planes(buffer: Any, keep_copy: bool = False) -> Callable[[Any], object]:
    """A ``convert`` that copies each frame's planes into the next row of ``buffer`` (as predict's
    staging does) and returns the frame (for ``hold``), or with ``keep_copy`` a copy of that row
    (the planes kept in memory of their own, the decoder's frame let go)."""
    import numpy as np

    from libreyolo_models.predict.planar import planar_frame

    rows = [row.numpy() for row in buffer]
    count = 0

    def convert(frame: Any) -> object:
        nonlocal count
        planar, row = planar_frame(frame), rows[count % len(rows)]
        count += 1
        if planar is not None:
            planar.copy_into(row)
        return np.array(row) if keep_copy else frame

    return convert


def _decode_into_slots(path: str, shm_name: str, slots: int, slot_bytes: int, free: Any, filled: Any) -> None:
    """In a child process: decode ``path`` as predict does and copy each frame's planes into a free
    slot of the shared ring, naming it on ``filled`` (-1 once open, None at the end)."""
    from multiprocessing import shared_memory

    import av
    import numpy as np

    from libreyolo_models.predict.planar import planar_frame

    shm = shared_memory.SharedMemory(name=shm_name)
    ring: Any = np.ndarray((slots, slot_bytes), np.uint8, shm.buf)
    try:
        with av.open(path) as container:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            filled.put(-1)
            for frame in container.decode(stream):
                slot = free.get(timeout=60)
                planar = planar_frame(frame)
                if planar is not None:
                    planar.copy_into(ring[slot])
                filled.put(slot)
        filled.put(None)
    finally:
        ring = None  # the buffer's export must go before the mapping closes
        shm.close()


def decoded_in_a_process(path: Path, buffer: Any, slots: int = 64) -> float:
    """Frames per second of decoding in a child process (``spawn``; its start and imports not
    timed) that hands each frame's planes over through shared memory, this process copying them
    into the rows of ``buffer`` as predict's staging would: the decoder away from this process's
    GIL and allocator. Every wait is bounded."""
    import multiprocessing
    import queue
    from multiprocessing import shared_memory

    import numpy as np

    rows = [row.numpy().reshape(-1) for row in buffer]
    slot_bytes = rows[0].size
    ctx = multiprocessing.get_context("spawn")
    free, filled = ctx.Queue(), ctx.Queue()
    shm = shared_memory.SharedMemory(create=True, size=slots * slot_bytes)
    ring: Any = np.ndarray((slots, slot_bytes), np.uint8, shm.buf)
    child = ctx.Process(target=_decode_into_slots, args=(str(path), shm.name, slots, slot_bytes, free, filled),
                        daemon=True)
    try:
        for slot in range(slots):
            free.put(slot)
        child.start()
        if filled.get(timeout=120) != -1:
            raise RuntimeError("the decoding process did not start")
        started, frames = time.perf_counter(), 0
        while (slot := filled.get(timeout=60)) is not None:
            rows[frames % len(rows)][:] = ring[slot]
            free.put(slot)
            frames += 1
        rate = frames / (time.perf_counter() - started)
        child.join(timeout=30)
        return rate
    except queue.Empty:
        log("the decoding process went silent for 60 s: arm abandoned")
        return float("nan")
    finally:
        if child.is_alive():
            child.terminate()
            child.join(timeout=10)
        ring = None
        shm.close()
        shm.unlink()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--video", type=Path, default=None, help="default: a 1080p30 pan over a photograph")
    p.add_argument("--seconds", type=int, default=10, help="length of the generated video")
    p.add_argument("--imgsz", type=int, default=640)
    p.add_argument("--batch", type=int, default=32, help="predict's batch (--predict)")
    p.add_argument("--rounds", type=int, default=3, help="turns of the host arms")
    p.add_argument("--predict", action="store_true", help="also predict's stages and predict end to end (CUDA)")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    path = args.video
    if path is None:
        path = Path(tempfile.mkdtemp()) / f"pan{args.seconds}s.mp4"
        why = write_video(path, args.seconds, kind="photos")
        if why is not None:
            log(f"no video: {why}")
            return 1

    def scaled(frame: Any) -> object:
        w, h = frame.width, frame.height
        s = args.imgsz / max(w, h)
        return frame.reformat(width=round(w * s) // 2 * 2, height=round(h * s) // 2 * 2, format="rgb24").to_ndarray()

    import torch

    buffer = batch_buffer(path, args.batch, pinned=torch.cuda.is_available())
    held = 3 * args.batch  # predict's batches in flight: the one on the device and two prefetched
    arms: list[tuple[str, Callable[[Any], object], int]] = [
        ("decode alone", lambda f: None, 0),
        ("decode + RGB array at full size (predict off CUDA)", lambda f: f.to_ndarray(format="rgb24"), 0),
        (f"decode + RGB array scaled to {args.imgsz} in the same swscale pass", scaled, 0),
        ("decode + planar YUV array (predict on CUDA, converted there)", lambda f: f.to_ndarray(format="yuv420p"), 0),
        (f"decode, the last {args.batch} frames kept alive", lambda f: f, args.batch),
        (f"decode, the last {held} frames kept alive", lambda f: f, held),
        (f"decode + planes copied into a {'pinned ' if buffer.is_pinned() else ''}batch buffer, frames let go",
         copy_planes(buffer), 0),
        (f"decode + planes copied into that buffer, the last {held} frames kept alive (predict)",
         copy_planes(buffer), held),
        (f"decode + planes copied into that buffer and from it into an array; frames let go, the last {held} "
         "arrays kept alive", copy_planes(buffer, keep_copy=True), held),
    ]
    if buffer.is_pinned():  # is writing into page-locked memory what costs?
        arms.append(("decode + planes copied into a pageable batch buffer, frames let go",
                     copy_planes(batch_buffer(path, args.batch, pinned=False)), 0))
    in_process = "decode in a child process, planes through shared memory, copied into the batch buffer here"
    rates: dict[str, list[float]] = {name: [] for name, _, _ in [*arms, (in_process, None, 0)]}
    for _ in range(args.rounds):
        for name, convert, hold in arms:
            rates[name].append(frames_per_second(path, convert, hold))
        rates[in_process].append(decoded_in_a_process(path, buffer))
    lines = [f"# Video frames per second on the host ({path.name}; arms taking turns, median of {args.rounds})", "",
             "| pipeline | frames/s | rounds |", "|---|---:|---|"]
    for name, values in rates.items():
        add_row(lines, f"| {name} | {statistics.median(values):.0f} | {', '.join(f'{v:.0f}' for v in values)} |")
    if args.predict:
        predict_stages(path, args, lines)
    emit_report(lines, args.out)
    return 0


def predict_stages(path: Path, args: argparse.Namespace, lines: list[str]) -> None:
    """Rows for predict's own stages on ``path`` (see the module docstring), and per-phase means."""
    import torch

    if not torch.cuda.is_available():
        log("--predict needs a CUDA GPU: predict's stages skipped")
        return
    from bench_predict import fresh_model, phase_means

    from libreyolo_models.predict import predictor
    from libreyolo_models.predict.predictor import _batches
    from libreyolo_models.predict.prefetch import Prefetcher
    from libreyolo_models.predict.staging import PinnedStaging
    from libreyolo_models.predict.streams import open_source

    stream = torch.cuda.current_stream()  # starts CUDA, which the first pinned buffer would otherwise time

    def prefetch_rate(planar: bool, staging: PinnedStaging, ahead: bool = False) -> float:
        started, frames = time.perf_counter(), 0
        decoded = open_source(str(path), shrink_to=args.imgsz, planar_video=planar).frames
        if ahead:  # as predict does on CUDA (predictor.DECODE_AHEAD): decoding on a thread of its own
            decoded = iter(Prefetcher(decoded, depth=args.batch))
        for batch in _batches(decoded, args.batch, staging=staging):
            frames += len(batch.frames)
            if batch.slot is not None:
                staging.release(batch.slot, stream)
        return frames / (time.perf_counter() - started)

    for planar, ahead in ((True, False), (True, True), (False, False), (False, True)):
        staging = PinnedStaging(4)
        prefetch_rate(planar, staging, ahead)  # pins the ring's buffers, fills the page cache
        rate = prefetch_rate(planar, staging, ahead)
        add_row(lines, f"| predict's prefetch work alone ({'planes' if planar else 'RGB'}, pinned batches of "
                       f"{args.batch}, {'decoding on a thread of its own' if ahead else 'one thread'}) | {rate:.0f} |")
    model = fresh_model("t", args.imgsz)
    arms: tuple[tuple[str, dict[str, Any], bool], ...] = (("frames to the GPU as planes", {}, True),
            ("frames to the GPU as planes, decoding on the prefetch thread (DECODE_AHEAD off)", {}, False),
            ("RGB on the host (gpu_decode=False)", {"gpu_decode": False}, True))

    def predict(options: dict[str, Any]) -> tuple[int, dict[str, float]]:
        return phase_means(model.predict(str(path), device=0, imgsz=args.imgsz, batch=args.batch, stream=True,
                                         cuda_graph=True, half=True, fuse=True, **options))

    for _name, options, _ in arms:  # capture, cuDNN, page cache
        predict(options)
    rates: dict[str, list[float]] = {name: [] for name, _, _ in arms}
    means_of: dict[str, dict[str, float]] = {}
    for _ in range(args.rounds):  # the arms take turns
        for name, options, ahead in arms:
            predictor.DECODE_AHEAD = ahead
            started = time.perf_counter()
            n, means_of[name] = predict(options)
            rates[name].append(n / (time.perf_counter() - started))
    predictor.DECODE_AHEAD = True
    phases = []
    for name, values in rates.items():
        add_row(lines, f"| predict end to end, half+fuse+graph, {name} | {statistics.median(values):.0f} | "
                       f"{', '.join(f'{v:.0f}' for v in values)} |")
        phases.append(f"| {name} | " + " | ".join(f"{means_of[name][k]:.3f}" for k in ("decode", "preprocess",
                                                                                      "inference", "postprocess")) + " |")
    lines += ["", "Predict's per-phase means (ms a frame; decode: the prefetch thread's time and the device's "
                  "conversion):", "", "| predict | decode | preprocess | network | postprocess |", "|---|---:|---:|---:|---:|",
              *phases]


if __name__ == "__main__":
    sys.exit(main())
