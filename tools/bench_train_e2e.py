"""End-to-end training throughput: eager vs ``cuda_graph=True``, full epochs, in one run.

Trains YOLOv9 (default t) on a synthetic 640 px YOLO dataset with the real trainer (data pipeline,
augmentation, AMP, EMA, optimizer), once eagerly and once with CUDA graphs, from the same seed and
weights, and reports per arm the training images/s of the epochs after the first (the first pays
for the image cache, worker start-up and capture), the share of time waiting for data, the ratio,
and whether the per-epoch losses were bit-identical. The peer, Ultralytics' YOLOv9 of the same size,
trains on the same data with the same batch, image size, AMP and epoch count in the same
invocation (``tools/peer_ultralytics.py``, a subprocess; ``--no-peer`` skips it); a ratio to a
figure from another run would be noise (the same Ultralytics run measured 161 and 327 img/s).

    python tools/bench_train_e2e.py --images 2048 --epochs 3 --batch 32
    python tools/bench_train_e2e.py --profile   # where a step's time goes (synchronizes each phase)
    python tools/bench_train_e2e.py --arms eager,graph,graph-cl,graph-cl-fast

An arm is ``eager`` or ``graph`` plus optional suffixes: ``-cl`` trains with ``channels_last=True``;
``-fast`` trains with ``deterministic=False``, so the trainer's default ``cudnn_benchmark="auto"``
lets cuDNN pick the fastest kernels (losses are then no longer reproducible run to run); arms
without ``-fast`` use ``--deterministic`` (default on, for the bit-identical loss check). Arms
without ``-cl`` pass ``channels_last=False``.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
from peer_ultralytics import run_peer
from report import emit_report, log
from synthetic_set import write_yolo_dataset


def read_rows(run_dir: Path) -> list[dict[str, float]]:
    with (run_dir / "results.csv").open() as fh:
        return [{k: float(v) for k, v in row.items() if v} for row in csv.DictReader(fh)]


def run_arm(data: Path, project: Path, *, arm: str, args: argparse.Namespace) -> list[dict[str, float]]:
    from libreyolo_models import LibreYOLO9

    kind, *suffixes = arm.split("-")
    if kind not in ("eager", "graph") or set(suffixes) - {"cl", "fast"}:
        sys.exit(f"--arms: unknown arm {arm!r}; use eager or graph, optionally with -cl and/or -fast")
    graph, fast = kind == "graph", "fast" in suffixes
    deterministic = args.deterministic and not fast
    torch.manual_seed(0)
    model = LibreYOLO9(size=args.size)

    started = time.perf_counter()

    def report(event) -> None:  # noqa: ANN001 - the training graphs as they stand when training ends
        if type(event).__name__ == "TrainStart":
            setup_s[arm] = time.perf_counter() - started
        if type(event).__name__ == "TrainEnd" and model.graphs.training is not None:
            info = model.graphs.training.info()
            log(f"    graphs: {[(g.signature, g.replays, round(g.capture_ms)) for g in info.graphs]}, "
                f"eager calls {info.eager_calls}, latched {info.latched}")

    outcome = model.train(data=str(data), epochs=args.epochs, imgsz=args.imgsz, batch=args.batch, device=0,
                          workers=args.workers, amp=True, cuda_graph=graph, val=False, plots=False,
                          close_mosaic=0, seed=0, deterministic=deterministic, profile=args.profile,
                          channels_last="cl" in suffixes, project=str(project),
                          name=arm, verbose=False, callbacks=[report])
    return read_rows(outcome.run_dir)


setup_s: dict[str, float] = {}  # arm -> seconds from model.train() to the first epoch (cache, workers)


def summarize(rows: list[dict[str, float]]) -> tuple[float, float]:
    timed = rows[1:] or rows
    images = sum(r["train/images_per_s"] * r["train/epoch_s"] for r in timed)
    seconds = sum(r["train/epoch_s"] for r in timed)
    wait = sum(r["train/data_wait_share"] * r["train/epoch_s"] for r in timed) / seconds
    return images / seconds, wait


def phase_table(results: dict[str, list[dict[str, float]]], batch: int) -> list[str]:
    """Milliseconds per step in each phase, epochs after the first, from the profile/* columns."""
    phases = ("data", "forward", "loss", "backward", "optimizer")
    lines = ["", "Per-step phase times (ms, synchronized; epochs after the first):", "",
             "| arm | " + " | ".join(phases) + " | sum |", "|---" * (len(phases) + 2) + "|"]
    for arm, rows in results.items():
        timed = rows[1:] or rows
        steps = sum(round(r["train/images_per_s"] * r["train/epoch_s"] / batch) for r in timed)
        if not steps or not all(f"profile/{p}_s" in r for r in timed for p in phases):
            lines.append(f"| {arm} | " + " | ".join("-" for _ in phases) + " | - |")
            continue
        ms = [1000 * sum(r[f"profile/{p}_s"] for r in timed) / steps for p in phases]
        lines.append(f"| {arm} | " + " | ".join(f"{v:.1f}" for v in ms) + f" | {sum(ms):.1f} |")
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="t")
    p.add_argument("--images", type=int, default=2048)
    p.add_argument("--imgsz", type=int, default=640)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--workers", type=int, default=min(12, os.cpu_count() or 1))
    p.add_argument("--arms", default="eager,graph")
    p.add_argument("--deterministic", action=argparse.BooleanOptionalAction, default=True,
                   help="deterministic kernels in both arms (needed for bit-identical losses)")
    p.add_argument("--peer", action=argparse.BooleanOptionalAction, default=True,
                   help="also train Ultralytics' YOLOv9 of this size on the same data in this run")
    p.add_argument("--profile", action="store_true",
                   help="time each step phase (synchronizes, so images/s drop); adds a per-phase table")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_train_e2e.py needs a CUDA GPU")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("LIBREYOLO_CACHE_DIR", str(Path(tmp) / "cache"))
        log(f"writing {args.images} synthetic images at {args.imgsz} px ...")
        data = write_yolo_dataset(Path(tmp) / "data", n_train=args.images, n_val=64, imgsz=args.imgsz)
        results = {}
        for arm in args.arms.split(","):
            log(f"arm {arm}: {args.epochs} epochs ...")
            results[arm] = run_arm(data, Path(tmp) / "runs", arm=arm, args=args)
            log(f"    {[round(r['train/images_per_s'], 1) for r in results[arm]]} images/s per epoch")
        peer: dict = {"skipped": "--no-peer"}
        if args.peer:
            log("peer: Ultralytics ...")
            peer = run_peer("train", data=str(data), model=f"yolov9{args.size}.yaml", imgsz=args.imgsz,
                            batch=args.batch, epochs=max(args.epochs, 3), device="0", workers=args.workers,
                            images=args.images)
            log(f"    {peer}")
    peer_ips = peer.get("images_per_s")
    gpu = torch.cuda.get_device_name(0)
    lines = [f"End-to-end training, YOLOv9-{args.size}, {args.imgsz} px, batch {args.batch}, AMP, "
             f"{args.images} images x {args.epochs} epochs (first epoch not timed), {args.workers} workers, "
             f"deterministic={args.deterministic}; {datetime.date.today()}, torch {torch.__version__}, {gpu}",
             "", "| arm | images/s | data wait | setup s | first epoch s | vs eager | vs Ultralytics (same run) |",
             "|---|---|---|---|---|---|---|"]
    eager_ips = summarize(results["eager"])[0] if "eager" in results else None
    for arm, rows in results.items():
        ips, wait = summarize(rows)
        ratio = f"{ips / eager_ips:.2f}x" if eager_ips else "-"
        vs_peer = f"{ips / peer_ips:.2f}x" if peer_ips else "-"
        lines.append(f"| {arm} | {ips:.0f} | {wait:.0%} | {setup_s.get(arm, float('nan')):.1f} | "
                     f"{rows[0]['train/epoch_s']:.1f} | {ratio} | {vs_peer} |")
    if peer_ips:
        first = peer.get("first_step_s")
        lines.append(f"| Ultralytics yolov9{args.size} | {peer_ips:.0f} | - | first step after "
                     f"{first:.1f} s | - | - | 1.00x |" if first else f"| Ultralytics | {peer_ips:.0f} | | | | | 1.00x |")
    else:
        lines.append(f"| Ultralytics | not run: {peer.get('skipped') or peer.get('error')} | | | | | |")
    if {"eager", "graph"} <= set(results):
        keys = ("train/box_loss", "train/cls_loss", "train/dfl_loss")
        same = all(a[k] == b[k] for a, b in zip(results["eager"], results["graph"]) for k in keys)
        lines += ["", f"per-epoch losses identical (eager vs graph, as written to results.csv): {'yes' if same else 'no'}"]
        for a, b in zip(results["eager"], results["graph"]):
            lines.append(f"- epoch {int(a['epoch'])}: eager {[a[k] for k in keys]} / graph {[b[k] for k in keys]}")
    if args.profile:
        lines += phase_table(results, args.batch)
    emit_report(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
