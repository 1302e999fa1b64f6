#!/usr/bin/env python
"""Where a video's frames per second go on the host: decoding, and converting each frame for predict.

PyAV decodes on FFmpeg's own threads (``thread_type="AUTO"``, as ``predict.video`` does); off CUDA
predict then converts every kept frame to an RGB array (``VideoFrame.to_ndarray("rgb24")``,
FFmpeg's swscale on the calling thread), on CUDA it takes the planar yuv420p array and converts on
the GPU (``predict.planar``). This reads the frames per second of the decode alone, of the decode
with each of those, and with a conversion scaled to the letterbox in the same swscale pass, on the
bench's 1080p pan over a photograph (``predict_media.write_video``) or a video you name.

    python tools/probe_video_decode.py --seconds 10 --out video-decode.md
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from predict_media import write_video
from report import add_row, emit_report, log


def frames_per_second(path: Path, convert: Callable[[Any], object]) -> float:
    import av

    container = av.open(str(path))
    try:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        started, frames = time.perf_counter(), 0
        for frame in container.decode(stream):
            convert(frame)
            frames += 1
        return frames / (time.perf_counter() - started)
    finally:
        container.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--video", type=Path, default=None, help="default: a 1080p30 pan over a photograph")
    p.add_argument("--seconds", type=int, default=10, help="length of the generated video")
    p.add_argument("--imgsz", type=int, default=640)
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

    arms: list[tuple[str, Callable[[Any], object]]] = [
        ("decode alone", lambda f: None),
        ("decode + RGB array at full size (predict off CUDA)", lambda f: f.to_ndarray(format="rgb24")),
        (f"decode + RGB array scaled to {args.imgsz} in the same swscale pass", scaled),
        ("decode + planar YUV array (predict on CUDA, converted there)", lambda f: f.to_ndarray(format="yuv420p")),
    ]
    lines = [f"# Video frames per second on the host ({path.name})", "", "| pipeline | frames/s |", "|---|---:|"]
    for name, convert in arms:
        add_row(lines, f"| {name} | {frames_per_second(path, convert):.0f} |")
    emit_report(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
