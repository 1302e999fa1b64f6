#!/usr/bin/env python
"""A folder's predict throughput against the number of decoding threads and processes (GPU).

``bench_predict.py``'s folder scenario (``--set``: photographs by default, at batch 32, graphed) with the decode pool
at 1, 2, 4 and 8 threads (``predict.sources.MAX_DECODE_THREADS``) and at 4 and 8 worker processes
(``predict.decode_procs.MAX_DECODE_PROCESSES``), and the per-phase means: more threads decode more
files at once, but every one of them takes the GIL for its Python part, and the main thread
issuing the GPU work waits for it each time; processes have a GIL each but pass their pixels
through shared memory. JPEGs decode on the CPU unless ``--gpu-decode`` (then the threads or
processes only read them, and nvJPEG decodes each batch: ``predict.gpu_jpeg``).

    python tools/probe_folder.py --images 1000 --out probe-folder.md
    python tools/probe_folder.py --gpu-decode --threads 4 --processes 4
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
from bench_predict import fresh_model, phase_means
from predict_media import write_images
from report import emit_report, log


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=1000)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--threads", default="1,2,4,8")
    p.add_argument("--processes", default="4,8", help="decoding processes to try after the threads ('' for none)")
    p.add_argument("--gpu-decode", action="store_true", help="JPEGs decoded on the GPU (needs TorchCodec)")
    p.add_argument("--set", choices=("photos", "synthetic"), default="photos",
                   help="crops of tools/photos/ (720p, 1080p and portrait; bench_predict's default) or synthetic 720p")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        log("needs a CUDA GPU")
        return 1
    from libreyolo_models.data.decode import ImageDecodeError
    from libreyolo_models.predict import decode_procs, sources
    from libreyolo_models.predict.streams import decode_files

    folder = Path(tempfile.mkdtemp()) / "images"
    write_images(folder, args.images, args.set)
    model = fresh_model("t", 640)
    opts = {"device": 0, "imgsz": 640, "batch": args.batch, "stream": True, "cuda_graph": True,
            "gpu_decode": args.gpu_decode}
    phase_means(model.predict(str(folder), **opts))  # capture, cuDNN, page cache
    # decode_files takes a list that may hold errors to report, too
    paths: list[Path | ImageDecodeError] = [path for path in sorted(folder.glob("*.jpg"))]
    rows = []
    settings = [("threads", int(t)) for t in args.threads.split(",") if t]
    settings += [("processes", int(k)) for k in args.processes.split(",") if k]
    for kind, count in settings:
        sources.MAX_DECODE_THREADS = count if kind == "threads" else 4
        decode_procs.MAX_DECODE_PROCESSES = count if kind == "processes" else 0
        decode_procs.MIN_FILES = 1
        started = time.perf_counter()
        decoded = sum(1 for _ in decode_files(paths, shrink_to=640, gpu_jpeg=args.gpu_decode))
        alone = decoded / (time.perf_counter() - started)
        started = time.perf_counter()
        n, ph = phase_means(model.predict(str(folder), **opts))
        rows.append(f"| {count} {kind} | {alone:.0f} | {n / (time.perf_counter() - started):.0f} | {ph['decode']:.3f} | "
                    f"{ph['preprocess']:.3f} | {ph['inference']:.3f} | {ph['postprocess']:.3f} |")
    what = "photographs 720p/1080p/portrait" if args.set == "photos" else "synthetic 1280x720"
    lines = [f"# Folder predict vs decode threads ({args.images} JPEGs, {what}, batch {args.batch}, graphed, "
             f"{'nvJPEG' if args.gpu_decode else 'CPU'} decoding; "
             f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {os.cpu_count()} CPUs)", "",
             "| decoding | decoded alone, images/s | predict images/s | decode | preprocess | network | postprocess (ms per image) |",
             "|---:|---:|---:|---:|---:|---:|---:|", *rows]
    emit_report(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
