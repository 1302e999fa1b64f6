#!/usr/bin/env python
"""A folder's predict throughput against the number of decoding threads (GPU).

``bench_predict.py``'s folder scenario (1280x720 JPEGs at batch 32, graphed) with the decode pool
at 1, 2, 4 and 8 threads (``predict.sources.MAX_DECODE_THREADS``), and the per-phase means: more
threads decode more files at once, but every one of them takes the GIL for its Python part, and
the main thread issuing the GPU work waits for it each time.

    python tools/probe_folder.py --images 1000 --out probe-folder.md
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch
from bench_predict import fresh_model, phase_means, write_images
from report import emit_report, log


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=1000)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--threads", default="1,2,4,8")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        log("needs a CUDA GPU")
        return 1
    from libreyolo_models.predict import sources

    folder = Path(tempfile.mkdtemp()) / "images"
    write_images(folder, args.images)
    model = fresh_model("t", 640)
    opts = {"device": 0, "imgsz": 640, "batch": args.batch, "stream": True, "cuda_graph": True}
    phase_means(model.predict(str(folder), **opts))  # capture, cuDNN, page cache
    rows = []
    for threads in (int(t) for t in args.threads.split(",")):
        sources.MAX_DECODE_THREADS = threads
        started = time.perf_counter()
        n, ph = phase_means(model.predict(str(folder), **opts))
        rows.append(f"| {threads} | {n / (time.perf_counter() - started):.0f} | {ph['decode']:.3f} | "
                    f"{ph['preprocess']:.3f} | {ph['inference']:.3f} | {ph['postprocess']:.3f} |")
    lines = [f"# Folder predict vs decode threads ({args.images} JPEGs 1280x720, batch {args.batch}, graphed; "
             f"{torch.cuda.get_device_name()}, torch {torch.__version__})", "",
             "| decode threads | images/s | decode | preprocess | network | postprocess (ms per image) |",
             "|---:|---:|---:|---:|---:|---:|", *rows]
    emit_report(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
