"""End-to-end training throughput: eager vs ``cuda_graph=True``, full epochs, in one run.

Trains YOLOv9 (sizes ``--sizes``, default t) on a synthetic YOLO dataset with the real trainer
(data pipeline, augmentation, AMP, EMA, optimizer), once per arm (eagerly, with CUDA graphs, ...)
at every batch of ``--batches``, from the same seed and weights. Per arm it reports the training
images/s of the epochs after the first (the first pays for the image cache, worker start-up and
capture), the share of time waiting for data, the time to the first optimizer step (from
``model.train()``), the peak GPU memory (allocated and reserved) and the CUDA-graph pool, the
ratios to eager and to the peer, and whether eager and graphed per-epoch losses were bit-identical.
The peer, Ultralytics' YOLOv9 of the same size, trains on the same data with the same batch, image
size, AMP and epoch count in the same invocation (``tools/peer_ultralytics.py``, a subprocess;
``--no-peer`` skips it); a ratio to a figure from another run would be noise (the same Ultralytics
run measured 161 and 327 img/s). The peer trains after our arms unless ``--arms`` names
``ultralytics`` where it should train; naming it twice (``ultralytics,eager-cl-fast,graph-cl-fast,
ultralytics``) brackets our arms between two peer runs and the ratios use their mean, so a machine
drifting during the run moves both sides alike. Any arm named twice runs twice (``(run 2)``).

    python tools/bench_train_e2e.py --images 2048 --epochs 3 --batches 32
    python tools/bench_train_e2e.py --profile --batches 8,32,64 --images 512 --epochs 2 --no-peer
    python tools/bench_train_e2e.py --sizes t,s --batches 8,32 --no-peer
    python tools/bench_train_e2e.py --arms eager,graph,graph-cl,graph-cl-fast

``--profile`` synchronizes around every phase of every step (data wait, forward, loss, backward,
gradient sync, optimizer, EMA, logging) and adds a per-step table in milliseconds; images/s drop,
so profile in its own invocation. An arm is ``eager`` or ``graph`` plus optional suffixes: ``-cl``
trains with ``channels_last=True``; ``-fast`` trains with ``deterministic=False`` and
``cudnn_benchmark=True`` (the trainer's ``"auto"`` leaves the autotuner off for a run this
short), so cuDNN picks the fastest kernels (losses are then no longer reproducible run to run); arms without ``-fast`` use ``--deterministic`` (default on,
for the bit-identical loss check). Arms without ``-cl`` pass ``channels_last=False``. ``-host``
trains with ``cache="ram"``: the images stay on the host and workers ship tiles, which is how every
arm ran before the GPU-resident image cache (``cache="auto"``, the default, now keeps a split that
fits in a quarter of the free GPU memory on the GPU). ``-cpuaug`` trains with ``gpu_augment=False``
(and ``cache="ram"``): the workers render whole batches (mosaic, affine, colour) on the CPU and the
main process only uploads them, leaving the launch-bound eager step the host to itself.
``-casts`` trains without the fp16 weight copies (``train.half_weights``): autocast casts every
weight on every forward and autograd casts every gradient back, as before those copies.
``-rendereager`` renders the GPU path's batches eagerly instead of replaying them from CUDA graphs
(``tasks.detect.render_graph``), as before those graphs.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import csv
import datetime
import gc
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import torch
from peer_ultralytics import run_peer
from report import emit_report, fmt, log
from synthetic_set import write_yolo_dataset

from libreyolo_models import LibreYOLO
from libreyolo_models.train.callbacks import TrainEnd, TrainStart
from libreyolo_models.train.trainer import TrainOutcome

PHASES = ("data", "forward", "loss", "backward", "sync", "optimizer", "ema", "log")
LOSS_KEYS = ("train/box_loss", "train/cls_loss", "train/dfl_loss")
GIB = 2**30


@dataclass
class ArmResult:
    """One arm's training run at one (size, batch)."""

    rows: list[dict[str, float]]
    setup_s: float = float("nan")          # model.train() -> the first epoch (cache, workers, optimizer)
    peak_allocated: int = 0
    peak_reserved: int = 0
    pool_bytes: int = 0
    graph_note: str = ""
    render_note: str = ""
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def timed(self) -> list[dict[str, float]]:
        return self.rows[1:] or self.rows

    def images_per_s(self) -> float:
        images = sum(r["train/images_per_s"] * r["train/epoch_s"] for r in self.timed)
        return images / sum(r["train/epoch_s"] for r in self.timed)

    def data_wait(self) -> float:
        seconds = sum(r["train/epoch_s"] for r in self.timed)
        return sum(r["train/data_wait_share"] * r["train/epoch_s"] for r in self.timed) / seconds

    def first_step_s(self) -> float:
        return self.setup_s + self.rows[0].get("train/first_step_s", float("nan"))


def read_rows(run_dir: Path) -> list[dict[str, float]]:
    with (run_dir / "results.csv").open() as fh:
        return [{k: float(v) for k, v in row.items() if v} for row in csv.DictReader(fh)]


def run_arm(data: Path, project: Path, *, size: str, batch: int, arm: str, args: argparse.Namespace,
            run: int = 1) -> ArmResult:
    """Train one arm; ``run`` numbers an arm named more than once in ``--arms`` (its own run folder)."""
    from libreyolo_models import LibreYOLO9
    from libreyolo_models.tasks.detect import pipeline
    from libreyolo_models.tasks.detect.render_graph import RenderGraphs
    from libreyolo_models.train import half_weights

    kind, *suffixes = arm.split("-")
    if kind not in ("eager", "graph") or set(suffixes) - {"cl", "fast", "host", "cpuaug", "casts", "rendereager"}:
        sys.exit(f"--arms: unknown arm {arm!r}; use eager or graph, optionally with -cl, -fast, -host, -cpuaug, "
                 "-casts and/or -rendereager")
    graph, fast = kind == "graph", "fast" in suffixes
    deterministic = args.deterministic and not fast
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.manual_seed(0)
    model = LibreYOLO9(size=size)
    result = ArmResult(rows=[])
    started = time.perf_counter()
    made: list[RenderGraphs] = []

    class CountedRenderGraphs(RenderGraphs):
        """Keeps each instance, to report on its totals after training."""

        def __init__(self, imgsz: int, resident: torch.Tensor | None) -> None:
            super().__init__(imgsz, resident)
            made.append(self)

    def report(event: object) -> None:
        if isinstance(event, TrainStart):
            result.setup_s = time.perf_counter() - started
        if isinstance(event, TrainEnd) and event.training_graphs is not None:  # as they stand when training ends
            info = event.training_graphs
            result.pool_bytes = sum(g.pool_bytes for g in info.graphs)
            result.graph_note = (f"{len(info.graphs)} graph(s), {info.replays} replays, {info.eager_calls} eager calls"
                                 + (f", latched: {info.latched}" if info.latched else ""))

    with contextlib.ExitStack() as patches:  # each patch is undone when training ends, or fails
        patches.enter_context(mock.patch.object(pipeline, "RenderGraphs", CountedRenderGraphs))
        if "casts" in suffixes:  # autocast casts every weight on every forward (no fp16 weight copies)
            patches.enter_context(mock.patch.object(half_weights, "applies", lambda **_: False))
        if "rendereager" in suffixes:  # batches rendered by eager kernel launches, not graph replays
            patches.enter_context(mock.patch.object(pipeline, "wants_render_graphs", lambda device: False))
        outcome = _train(model, data, project, size=size, batch=batch, arm=arm if run == 1 else f"{arm}-run{run}",
                         args=args, graph=graph, deterministic=deterministic, suffixes=suffixes, report=report)
    for graphs in made:  # the trainer has closed its pipelines: totals, not what is held now
        totals = graphs.totals()
        if totals.graphs or totals.eager_calls:
            result.render_note = (f"batch rendering: {totals.graphs} graph(s), {totals.replays} replays, "
                                  f"{totals.eager_calls} eager calls, pool {totals.pool_bytes / GIB:.2f} GiB")
        graphs.release()
    result.rows = read_rows(outcome.run_dir)
    result.peak_allocated = torch.cuda.max_memory_allocated()
    result.peak_reserved = torch.cuda.max_memory_reserved()
    return result


def _train(model: LibreYOLO, data: Path, project: Path, *, size: str, batch: int, arm: str,
           args: argparse.Namespace, graph: bool, deterministic: bool, suffixes: list[str],
           report: Callable[[object], None]) -> TrainOutcome:
    outcome: TrainOutcome = model.train(
        data=str(data), epochs=args.epochs, imgsz=args.imgsz, batch=batch, device=0, workers=args.workers, amp=True,
        cuda_graph=graph, val=False, plots=False, close_mosaic=0, seed=0, deterministic=deterministic,
        profile=args.profile,
        # a benchmark's few hundred steps stand for a long run: autotune as one would
        cudnn_benchmark=True if not deterministic else "auto",
        channels_last="cl" in suffixes,
        cache="ram" if {"host", "cpuaug"} & set(suffixes) else "auto",
        gpu_augment=False if "cpuaug" in suffixes else "auto",
        project=str(project), name=f"{size}-b{batch}-{arm}", verbose=False, callbacks=[report])
    return outcome


def throughput_table(size: str, batch: int, results: dict[str, ArmResult], peers: dict[str, dict]) -> list[str]:
    """One row per arm and per peer run; ratios to the peer are against the mean of its readings
    (with the peer named twice in ``--arms``, before and after ours, the drift between them cancels)."""
    readings = [p["images_per_s"] for p in peers.values() if p.get("images_per_s")]
    peer_ips = statistics.fmean(readings) if readings else None
    lines = [f"### YOLOv9-{size}, batch {batch}", "",
             "| arm | images/s | data wait | first step s | setup s | first epoch s | peak alloc GiB | "
             "peak reserved GiB | graph pool GiB | vs eager (same settings) | vs Ultralytics (same run) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    eager = results.get("eager") or next((r for a, r in results.items() if a.startswith("eager")), None)
    for arm, res in results.items():
        ips = res.images_per_s()
        twin = results.get(eager_twin(arm)) or eager
        ratio = f"{ips / twin.images_per_s():.2f}x" if twin else "-"
        vs_peer = f"{ips / peer_ips:.2f}x" if peer_ips else "-"
        pool = f"{res.pool_bytes / GIB:.2f}" if arm.startswith("graph") else "-"
        lines.append(f"| {arm} | {ips:.0f} | {res.data_wait():.0%} | {res.first_step_s():.1f} | {res.setup_s:.1f} | "
                     f"{res.rows[0]['train/epoch_s']:.1f} | {res.peak_allocated / GIB:.2f} | "
                     f"{res.peak_reserved / GIB:.2f} | {pool} | {ratio} | {vs_peer} |")
    for name, peer in peers.items():
        peer_run_ips, first = peer.get("images_per_s"), peer.get("first_step_s")
        if not peer_run_ips or not peer_ips:
            lines.append(f"| {name} | not run: {peer.get('skipped') or peer.get('error')} | | | | | | | | | |")
            continue
        vs_eager = f"{peer_run_ips / eager.images_per_s():.2f}x" if eager else "-"
        lines.append(f"| {name}, yolov9{size} | {peer_run_ips:.0f} | - | {fmt(first, '.1f')} | - | - | - | - | - | "
                     f"{vs_eager} | {peer_run_ips / peer_ips:.2f}x |")
    if len(readings) > 1:
        lines.append(f"\nUltralytics read {', '.join(f'{r:.0f}' for r in readings)} images/s in this run; "
                     f"ratios to it are against their mean, {peer_ips:.0f}.")
    for arm in dict.fromkeys(a.split(" (run ")[0] for a in results):
        runs = [r.images_per_s() for a, r in results.items() if a.split(" (run ")[0] == arm]
        if len(runs) > 1 and peer_ips:
            mean = statistics.fmean(runs)
            lines.append(f"\n{arm}, mean of its {len(runs)} runs: {mean:.0f} images/s, {mean / peer_ips:.2f}x "
                         "Ultralytics' mean")
    for arm, res in results.items():
        if res.graph_note:
            lines.append(f"\n{arm}: {res.graph_note}")
        if res.render_note:
            lines.append(f"\n{arm}: {res.render_note}")
    for arm, res in results.items():
        twin_name = eager_twin(arm)
        if not arm.startswith("graph") or twin_name not in results:
            continue
        twin = results[twin_name]
        lines.append(f"\nmemory {arm} / {twin_name}: allocated {res.peak_allocated / twin.peak_allocated:.2f}x, "
                     f"reserved {res.peak_reserved / twin.peak_reserved:.2f}x (goal <= 1.25x)")
        if "fast" in arm:  # autotuned kernels: not reproducible run to run, so not compared bit for bit
            continue
        a_rows, b_rows = twin.rows, res.rows
        same = len(a_rows) == len(b_rows) and all(a[k] == b[k] for a, b in zip(a_rows, b_rows) for k in LOSS_KEYS)
        lines += ["", f"per-epoch losses identical ({twin_name} vs {arm}, as written to results.csv): "
                  f"{'yes' if same else 'no'}"]
        for a, b in zip(a_rows, b_rows):
            lines.append(f"- epoch {int(a['epoch'])}: eager {[a[k] for k in LOSS_KEYS]} / graph {[b[k] for k in LOSS_KEYS]}")
    return lines


def eager_twin(arm: str) -> str:
    """The eager arm with the same suffixes (``graph-cl-fast`` -> ``eager-cl-fast``)."""
    return "eager" + arm[len("graph"):] if arm.startswith("graph") else arm


def phase_table(results: dict[str, ArmResult]) -> list[str]:
    """Milliseconds per step in each phase, epochs after the first, from the profile/* columns."""
    lines = ["", "Per-step phase times (ms, synchronized; epochs after the first):", "",
             "| arm | " + " | ".join(PHASES) + " | sum | data share |", "|---" * (len(PHASES) + 3) + "|"]
    for arm, res in results.items():
        timed = res.timed
        steps = sum(r.get("profile/steps", 0.0) for r in timed)
        if not steps or not all(f"profile/{p}_s" in r for r in timed for p in PHASES):
            lines.append(f"| {arm} | " + " | ".join("-" for _ in PHASES) + " | - | - |")
            continue
        ms = [1000 * sum(r[f"profile/{p}_s"] for r in timed) / steps for p in PHASES]
        lines.append(f"| {arm} | " + " | ".join(f"{v:.2f}" for v in ms) + f" | {sum(ms):.1f} | {ms[0] / sum(ms):.0%} |")
    return lines


def arm_order(arms: str, *, peer: bool) -> list[str]:
    """``--arms`` in order; ``ultralytics`` marks where the peer trains (at the end when not named,
    dropped with ``--no-peer``). Any arm may be named more than once: ``ultralytics,eager-cl-fast,
    graph-cl-fast,ultralytics`` brackets ours between two peer runs."""
    order = [a for a in arms.split(",") if a]
    if not peer:
        return [a for a in order if a != "ultralytics"]
    return order if "ultralytics" in order else [*order, "ultralytics"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", "--size", default="t", help="YOLOv9 sizes, comma-separated (t,s)")
    p.add_argument("--batches", "--batch", default="32", help="batches, comma-separated (8,32,64)")
    p.add_argument("--images", type=int, default=2048)
    p.add_argument("--imgsz", type=int, default=640)
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
    sizes = [s for s in args.sizes.split(",") if s]
    batches = [int(b) for b in args.batches.split(",") if b]
    gpu = torch.cuda.get_device_name(0)
    lines = [f"End-to-end training, YOLOv9 {'/'.join(sizes)}, {args.imgsz} px, batches {batches}, AMP, "
             f"{args.images} images x {args.epochs} epochs (first epoch not timed), {args.workers} workers, "
             f"deterministic={args.deterministic}, profile={args.profile}; {datetime.date.today()}, "
             f"torch {torch.__version__}, {gpu}", ""]
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("LIBREYOLO_CACHE_DIR", str(Path(tmp) / "cache"))
        log(f"writing {args.images} synthetic images at {args.imgsz} px ...")
        data = write_yolo_dataset(Path(tmp) / "data", n_train=args.images, n_val=64, imgsz=args.imgsz)
        for size in sizes:
            for batch in batches:
                results: dict[str, ArmResult] = {}
                peers: dict[str, dict] = {}
                runs: collections.Counter[str] = collections.Counter()
                for arm in arm_order(args.arms, peer=args.peer):
                    runs[arm] += 1
                    key = arm if runs[arm] == 1 else f"{arm} (run {runs[arm]})"
                    log(f"YOLOv9-{size} batch {batch} arm {key}: {args.epochs} epochs ...")
                    if arm == "ultralytics":
                        peers[key] = run_peer("train", data=str(data), model=f"yolov9{size}.yaml", imgsz=args.imgsz,
                                              batch=batch, epochs=max(args.epochs, 3), device="0",
                                              workers=args.workers, images=args.images)
                        log(f"    {peers[key]}")
                        continue
                    results[key] = run_arm(data, Path(tmp) / "runs", size=size, batch=batch, arm=arm, args=args,
                                           run=runs[arm])
                    log(f"    {[round(r['train/images_per_s'], 1) for r in results[key].rows]} images/s per epoch")
                if not peers:
                    peers["Ultralytics"] = {"skipped": "--no-peer"}
                lines += throughput_table(size, batch, results, peers)
                if args.profile:
                    lines += phase_table(results)
                lines.append("")
                if args.out is not None:  # after every (size, batch): a time-out keeps what finished
                    args.out.write_text("\n".join(lines) + "\n")
    emit_report(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
