"""The Ultralytics peer, measured in the same invocation as our arms (never a typed-in figure).

The benchmark scripts run this file in a subprocess, so Ultralytics (a benchmark peer, never a
dependency of a package) only has to be importable there: on the GPU machine, install the wheels
carried in ``.whl/`` into a folder on ``PYTHONPATH`` (``tools/gpu_session.sh`` does). Prints one
``PEER {json}`` line; exits 3 with ``PEER {"skipped": reason}`` when Ultralytics is missing.

    python tools/peer_ultralytics.py train --data data.yaml --model yolov9t.yaml --imgsz 640 \
        --batch 32 --epochs 4 --device 0 --workers 8
    python tools/peer_ultralytics.py fit --data shapes/data.yaml --model yolov9t.yaml --imgsz 320 \
        --batch 32 --epochs 30 --device 0
    python tools/peer_ultralytics.py predict --model yolov9t.yaml --source img.jpg --reps 100 --device 0

Training throughput comes from Ultralytics' own ``results.csv`` (its cumulative ``time``
column, written by rank 0 after each epoch), which works for one GPU and for its DDP launcher
alike: images/s of each epoch after the first and before the last (the last also validates).
It trains with ``val=False, save=False, plots=False``, AMP, ``cache="ram"``. Where ``polars`` is
missing (Ultralytics reads its results.csv with it into every checkpoint), that checkpoint field
is left empty so the run goes on (``_checkpoints_without_polars``).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def _emit(payload: dict[str, Any]) -> None:
    print("PEER " + json.dumps(payload), flush=True)


def _import_yolo() -> Any:
    """Ultralytics' ``YOLO`` class (Any: the peer ships no type information)."""
    os.environ.setdefault("YOLO_OFFLINE", "1")
    try:
        from ultralytics import YOLO
    except ImportError as err:
        _emit({"skipped": f"ultralytics is not importable here ({err})"})
        sys.exit(3)
    _checkpoints_without_polars()
    return YOLO


def _checkpoints_without_polars() -> None:
    """Ultralytics copies its results.csv into every checkpoint through ``polars``; where polars is
    missing (the GPU machine) that metadata is left empty instead of ending the run after epoch 1.
    Training, validation and the timing are untouched."""
    try:
        import polars  # noqa: F401
    except ImportError:
        from ultralytics.engine.trainer import BaseTrainer

        setattr(BaseTrainer, "read_results_csv", lambda self: {})  # noqa: B010 - a patch of the peer's class


def _epoch_rates(csv_path: Path, images: int) -> list[float]:
    with csv_path.open() as fh:
        rows = [{k.strip(): v for k, v in r.items()} for r in csv.DictReader(fh)]
    times = [float(r["time"]) for r in rows]
    durations = [b - a for a, b in zip(times, times[1:])]  # epoch 2 onwards
    return [images / d for d in durations[:-1]] if len(durations) > 1 else [images / d for d in durations]


def train(args: argparse.Namespace) -> None:
    YOLO = _import_yolo()  # noqa: N806 - the peer's class name
    project = Path(tempfile.mkdtemp(prefix="peer-ultralytics-"))
    model = YOLO(args.model)
    first_step: dict[str, float] = {}
    started = time.perf_counter()

    def on_batch_end(trainer: Any) -> None:  # Ultralytics' trainer (no type information)
        first_step.setdefault("s", time.perf_counter() - started)

    model.add_callback("on_train_batch_end", on_batch_end)
    error = None
    try:
        model.train(data=args.data, imgsz=args.imgsz, batch=args.batch, epochs=args.epochs, device=args.device,
                    workers=args.workers, amp=True, cache="ram", val=False, save=False, plots=False,
                    project=str(project), name="peer", exist_ok=True, verbose=False, seed=0, deterministic=False)
    except Exception as err:  # noqa: BLE001 - reported, not raised
        error = f"{type(err).__name__}: {str(err)[:200]}"
    csv_path = next(project.rglob("results.csv"), None)
    if csv_path is None:
        _emit({"error": error or "no results.csv written"})
        sys.exit(1)
    images = sum(1 for p in Path(args.train_images).iterdir() if p.is_file()) if args.train_images else args.images
    rates = _epoch_rates(csv_path, images)
    _emit({"images_per_s": statistics.median(rates), "per_epoch": rates, "first_step_s": first_step.get("s"),
           "wall_s": time.perf_counter() - started, "ended_with": error})


def fit(args: argparse.Namespace) -> None:
    """Ultralytics' defaults (validation every epoch included) on ``--data``; per epoch the wall
    seconds since before ``model.train`` and the validation mAP50, for time-to-accuracy."""
    YOLO = _import_yolo()  # noqa: N806
    project = Path(tempfile.mkdtemp(prefix="peer-ultralytics-fit-"))
    model = YOLO(args.model)
    epochs: list[dict[str, float]] = []
    first_step: dict[str, float] = {}
    started = time.perf_counter()

    def on_batch_end(trainer: Any) -> None:  # Ultralytics' trainer (no type information)
        first_step.setdefault("s", time.perf_counter() - started)

    def on_fit_epoch_end(trainer: Any) -> None:
        metrics = getattr(trainer, "metrics", {}) or {}
        epochs.append({"wall_s": time.perf_counter() - started,
                       "mAP50": float(metrics.get("metrics/mAP50(B)", float("nan"))),
                       "mAP50-95": float(metrics.get("metrics/mAP50-95(B)", float("nan")))})

    model.add_callback("on_train_batch_end", on_batch_end)
    model.add_callback("on_fit_epoch_end", on_fit_epoch_end)
    milestones: dict[str, float] = {}  # the first time each callback ran, seconds since `started`
    for name in ("on_pretrain_routine_start", "on_pretrain_routine_end", "on_train_start", "on_train_batch_start"):
        model.add_callback(name, lambda trainer, name=name: milestones.setdefault(name, time.perf_counter() - started))
    error = None
    try:
        model.train(data=args.data, imgsz=args.imgsz, batch=args.batch, epochs=args.epochs, device=args.device,
                    workers=args.workers, plots=False, project=str(project), name="fit", exist_ok=True,
                    verbose=False, seed=0)
    except Exception as err:  # noqa: BLE001 - reported, not raised
        error = f"{type(err).__name__}: {str(err)[:200]}"
    if not epochs:
        _emit({"error": error or "no epoch finished"})
        sys.exit(1)
    _emit({"epochs": epochs, "first_step_s": first_step.get("s"), "wall_s": time.perf_counter() - started,
           "milestones": milestones, "ended_with": error})


def _phases(results: Iterable[Any]) -> dict[str, float]:  # Ultralytics' Results (no type information)
    """Mean ms per image of Ultralytics' own ``Results.speed`` phases, under our phase names."""
    names = {"preprocess": "preprocess", "inference": "inference", "postprocess": "postprocess"}
    sums: dict[str, float] = dict.fromkeys(names.values(), 0.0)
    n = dets = 0
    for res in results:
        n += 1
        dets += len(res.boxes) if res.boxes is not None else 0
        for theirs, ours in names.items():
            sums[ours] += float((res.speed or {}).get(theirs) or 0.0)
    return {k: v / max(n, 1) for k, v in sums.items()} | {"n": n, "dets": dets / max(n, 1)}


def predict(args: argparse.Namespace) -> None:
    """Ultralytics' predict on the benchmark's files; keys match tools/bench_predict.py's arms."""
    YOLO = _import_yolo()  # noqa: N806
    import torch

    model = YOLO(args.model)
    kw = {"imgsz": args.imgsz, "device": args.device, "verbose": False, "conf": args.conf}
    if args.half:
        kw["half"] = True
    out: dict[str, object] = {}
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    if args.source:
        for _ in range(args.warmup):
            model.predict(args.source, **kw)
        times, last = [], []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            last = model.predict(args.source, **kw)
            times.append((time.perf_counter() - t0) * 1e3)
        out["image_ms"] = out["ms_median"] = statistics.median(times)
        out["image_phases"] = _phases(last)
    if args.folder:
        t0 = time.perf_counter()
        phases = _phases(model.predict(args.folder, batch=args.batch, stream=True, **kw))
        out["folder_per_s"] = out["folder_images_per_s"] = phases["n"] / (time.perf_counter() - t0)
        out["folder_phases"] = phases
    if args.video:
        t0 = time.perf_counter()
        phases = _phases(model.predict(args.video, batch=args.batch, stream=True, **kw))
        out["video_per_s"] = out["video_frames_per_s"] = phases["n"] / (time.perf_counter() - t0)
        out["video_phases"] = phases
    if torch.cuda.is_available():
        out["peak_mib"] = torch.cuda.max_memory_allocated() / 2**20
    _emit(out)


def run_peer(verb: str, timeout_s: float = 1800, **options: object) -> dict[str, Any]:
    """Run this file's ``verb`` in a subprocess; its ``PEER`` payload, or ``{"skipped": why}``.

    Options become ``--key value`` flags (``True`` as a bare flag). The subprocess's output goes
    to this process's stderr as it comes, so a long peer run shows progress.
    """
    import subprocess

    cmd = [sys.executable, __file__, verb]
    for key, value in options.items():
        if value is None or value is False:
            continue
        cmd.append(f"--{key.replace('_', '-')}")
        if value is not True:
            cmd.append(str(value))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"skipped": f"the peer run exceeded {timeout_s:.0f} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("PEER ")]
    if not lines:
        return {"skipped": f"the peer run printed no result (exit {proc.returncode}): {proc.stderr[-400:]}"}
    return json.loads(lines[-1][len("PEER "):])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="verb", required=True)
    t = sub.add_parser("train")
    t.add_argument("--data", required=True)
    t.add_argument("--model", default="yolov9t.yaml")
    t.add_argument("--imgsz", type=int, default=640)
    t.add_argument("--batch", type=int, default=32)
    t.add_argument("--epochs", type=int, default=4)
    t.add_argument("--device", default="0")
    t.add_argument("--workers", type=int, default=8)
    t.add_argument("--images", type=int, default=0, help="training images (for images/s)")
    t.add_argument("--train-images", default=None, help="or the training images folder to count")
    f = sub.add_parser("fit", help="train with Ultralytics' defaults, validating every epoch")
    f.add_argument("--data", required=True)
    f.add_argument("--model", default="yolov9t.yaml")
    f.add_argument("--imgsz", type=int, default=640)
    f.add_argument("--batch", type=int, default=16)
    f.add_argument("--epochs", type=int, default=30)
    f.add_argument("--device", default="0")
    f.add_argument("--workers", type=int, default=8)
    q = sub.add_parser("predict")
    q.add_argument("--model", default="yolov9t.yaml")
    q.add_argument("--source", default=None, help="one image, predicted --reps times at batch 1")
    q.add_argument("--folder", default=None, help="a folder, predicted once at --batch (streamed)")
    q.add_argument("--video", default=None, help="a video file, streamed")
    q.add_argument("--imgsz", type=int, default=640)
    q.add_argument("--batch", type=int, default=32)
    q.add_argument("--reps", type=int, default=100)
    q.add_argument("--warmup", type=int, default=10)
    q.add_argument("--conf", type=float, default=0.25)
    q.add_argument("--half", action="store_true")
    q.add_argument("--device", default="0")
    args = p.parse_args()
    {"train": train, "fit": fit, "predict": predict}[args.verb](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
