#!/usr/bin/env python
"""Where a video's predict time goes (GPU): the decoding side alone, then with the GPU work.

Frames per second of the bench's 720p video (``predict_media.write_video``) through growing parts
of predict's pipeline, each run on its own:

1. PyAV decode only (frames kept as ``av.VideoFrame``, no RGB conversion);
2. ``iter_video``: decode and RGB conversion (``to_ndarray``);
3. ``open_source`` frames grouped into pinned batches (``predict.predictor._batches``), on the
   calling thread: everything the prefetch thread does;
4. the same on the prefetch thread (``Prefetcher``), the consumer taking batches and nothing else;
5. the whole ``predict(stream=True)`` call, eager and graphed, with its per-phase means.

If 4 is far above 5, the two threads slow each other (the GIL); if 3 is near 5, decoding sets
the pace.

    python tools/probe_video.py --out probe-video.md
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from bench_predict import fresh_model, phase_means
from predict_media import write_video
from report import emit_report, log


def rate(count: Callable[[], int]) -> float:
    started = time.perf_counter()
    n = count()
    return n / (time.perf_counter() - started)


def _count(items: Iterable[Any], per: Callable[[Any], int] = lambda _: 1) -> int:
    return sum(per(item) for item in items)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--video-s", type=int, default=8)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--imgsz", type=int, default=640)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        log("needs a CUDA GPU")
        return 1
    import av

    from libreyolo_models.predict.predictor import _batches
    from libreyolo_models.predict.prefetch import Prefetcher
    from libreyolo_models.predict.staging import PinnedStaging
    from libreyolo_models.predict.streams import open_source
    from libreyolo_models.predict.video import iter_video

    video = Path(tempfile.mkdtemp()) / "probe.mp4"
    why = write_video(video, args.video_s)
    if why:
        log(f"no video: {why}")
        return 1

    def decode_only() -> int:
        with av.open(str(video)) as container:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            return _count(container.decode(stream))

    def batches(threaded: bool) -> int:
        staging = PinnedStaging(4)
        source = _batches(open_source(str(video)).frames, args.batch, staging=staging)
        fetch = Prefetcher(source, depth=2) if threaded else None
        n = 0
        try:
            for batch in fetch if fetch is not None else source:
                n += len(batch.frames)
                if batch.slot is not None:
                    staging.release(batch.slot, torch.cuda.current_stream())
        finally:
            if fetch is not None:
                fetch.close()
        return n

    rows = [("PyAV decode only", rate(decode_only)),
            ("iter_video (decode + RGB)", rate(lambda: _count(iter_video(str(video), source="probe")))),
            ("frames into pinned batches, calling thread", rate(lambda: batches(False))),
            ("frames into pinned batches, prefetch thread", rate(lambda: batches(True)))]
    phases = []
    default_switch = sys.getswitchinterval()
    for arm, options, switch in (("eager", {}, default_switch), ("graph", {"cuda_graph": True}, default_switch),
                                 ("graph, GIL switch 0.5 ms", {"cuda_graph": True}, 0.0005)):
        model = fresh_model("t", args.imgsz)
        opts = {"device": 0, "imgsz": args.imgsz, "batch": args.batch, "stream": True, "verbose": False, **options}
        phase_means(model.predict(str(video), **opts))  # warm: capture, cuDNN
        sys.setswitchinterval(switch)
        try:
            started = time.perf_counter()
            n, ph = phase_means(model.predict(str(video), **opts))
            rows.append((f"predict(stream=True), {arm}", n / (time.perf_counter() - started)))
        finally:
            sys.setswitchinterval(default_switch)
        started = time.perf_counter()
        n, _ = phase_means(model.predict(str(video), **{**opts, "verbose": True}))
        rows.append((f"predict(stream=True), {arm}, verbose", n / (time.perf_counter() - started)))
        phases.append((arm, ph))
        model.release_graphs()
    lines = [f"# Video pipeline ({args.video_s} s 720p30, batch {args.batch}; {torch.cuda.get_device_name()}, "
             f"torch {torch.__version__}, PyAV {av.__version__})", "", "| stage | frames/s |", "|---|---:|"]
    lines += [f"| {name} | {fps:.0f} |" for name, fps in rows]
    lines += ["", "| arm | decode wait | preprocess | network | postprocess (ms per frame) |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {arm} | {ph['decode']:.3f} | {ph['preprocess']:.3f} | {ph['inference']:.3f} | "
              f"{ph['postprocess']:.3f} |" for arm, ph in phases]
    emit_report(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
