#!/usr/bin/env python
"""Does sharing one process favour either side of ``bench_predict.py``'s interleaved scenario? (GPU)

The interleaved scenario times our one-image predict and Ultralytics' in one process, taking
turns, so the machine's drift drops out of their ratio. That is fair only if neither side runs
slower for the other's presence. This probe alternates blocks in one process:

- ``alone``: only the side being timed has run since the last block (the other side's models
  exist, or not, as the block's label says);
- ``turns``: both sides take turns call block by call block, as in the benchmark;

and repeats each kind with our models loaded and with them deleted, so a block's neighbours give
its drift. If the peer's time in ``turns`` or with our models loaded matched its ``alone`` blocks
without them, sharing the process costs it nothing; the same for ours with the peer.

    PYTHONPATH=... python tools/probe_interleave.py --out probe-interleave.md
"""

from __future__ import annotations

import argparse
import datetime
import gc
import statistics
import sys
import time
from pathlib import Path

import torch
from bench_predict import ARMS, fresh_model, parse_args, peer_predictor
from predict_media import write_images
from report import emit_report, log, median_call_ms


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=20, help="calls per block")
    p.add_argument("--blocks", type=int, default=4, help="blocks per phase")
    p.add_argument("--cycles", type=int, default=2, help="times the load / delete cycle repeats")
    p.add_argument("--out", type=Path, default=None)
    own = p.parse_args(argv)
    args = parse_args(["--warmup", "5"])
    if not torch.cuda.is_available():
        sys.exit("probe_interleave.py needs a CUDA GPU")
    image = write_images(Path("/tmp/probe-interleave"), 1)[0]
    peer, why = peer_predictor(args)
    if peer is None:
        sys.exit(why)
    for _ in range(args.warmup):
        peer(image)
    gc_ms = [0.0]
    started: list[float] = []

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(time.perf_counter())
        elif started:
            gc_ms[0] += (time.perf_counter() - started.pop()) * 1e3

    gc.callbacks.append(on_gc)
    rows: list[str] = []

    def record(label: str, side: str, values: list[float]) -> None:
        rows.append(f"| {label} | {side} | {statistics.median(values):.2f} | {', '.join(f'{v:.1f}' for v in values)} "
                    f"| {gc_ms[0]:.0f} |")
        log(rows[-1])

    for cycle in range(own.cycles):
        record(f"cycle {cycle + 1}: peer alone, none of ours loaded", "ultralytics",
               [median_call_ms(lambda: peer(image), own.calls) for _ in range(own.blocks)])
        models = {arm: fresh_model(args.size, args.imgsz) for arm in ("eager", "graph")}
        ours = {arm: (lambda m=m, o={"device": 0, "imgsz": args.imgsz, "conf": args.conf, **ARMS[arm]}:
                      m.predict(image, **o)) for arm, m in models.items()}
        for fn in ours.values():
            for _ in range(args.warmup):
                fn()
        record(f"cycle {cycle + 1}: peer alone, ours loaded and idle", "ultralytics",
               [median_call_ms(lambda: peer(image), own.calls) for _ in range(own.blocks)])
        for arm, fn in ours.items():
            record(f"cycle {cycle + 1}: {arm} alone", arm, [median_call_ms(fn, own.calls) for _ in range(own.blocks)])
        turns: dict[str, list[float]] = {"ultralytics": [], **{a: [] for a in ours}}
        for _ in range(own.blocks):
            turns["ultralytics"].append(median_call_ms(lambda: peer(image), own.calls))
            for arm, fn in ours.items():
                turns[arm].append(median_call_ms(fn, own.calls))
        for side, values in turns.items():
            record(f"cycle {cycle + 1}: taking turns", side, values)
        record(f"cycle {cycle + 1}: peer alone after the turns", "ultralytics",
               [median_call_ms(lambda: peer(image), own.calls) for _ in range(own.blocks)])
        for m in models.values():
            m.release_graphs()
        del models, ours
        gc.collect()
        torch.cuda.empty_cache()
    lines = [f"# One process, two predictors: blocks alone and taking turns ({datetime.date.today()}, "
             f"{torch.cuda.get_device_name(0)}, torch {torch.__version__})", "",
             f"YOLOv9-t random weights, one 1280x720 JPEG at batch 1, {own.calls} calls per block, {own.blocks} blocks "
             f"per row, ms (median of the blocks' medians, then each block); the last column is the Python garbage "
             "collector's time so far.", "",
             "| phase | side | ms | blocks | gc ms so far |", "|---|---|---:|---|---:|", *rows]
    emit_report(lines, own.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
