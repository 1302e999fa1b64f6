#!/usr/bin/env python
"""Where an eager training step's wall time goes (GPU): host syncs, GPU idle, CPU issue time.

Two parts, both YOLOv9 (``--size``) at ``--batch`` and ``--imgsz``, AMP, channels_last, cuDNN
autotune (the trainer's defaults):

1. **The bare step** on one fixed batch, no data pipeline: forward, loss, backward, optimizer,
   each timed on the host without synchronising (the CPU's issue time) and with CUDA events (the
   GPU's time), so a launch-bound phase shows as host time >= GPU time. It runs first, before
   anything of the trainer's (profiler, warning filters) is around.
2. **The real trainer** on a synthetic set for ``--epochs`` epochs (eager unless ``--graph``).
   Over the second-to-last epoch (its steps and its end, checkpoint writing included),
   ``torch.cuda.set_sync_debug_mode("warn")`` records every operation that makes the host wait
   for the GPU (each distinct Python stack once, with its count), ``torch.profiler`` records GPU
   kernel time against wall time (the GPU's idle share), the host time of the top operators and
   the synchronising CUDA calls, and the caching allocator's counters give its frees and retries.

    python tools/probe_train_step.py --batch 32 --out probe-train-step.md
"""

from __future__ import annotations

import argparse
import collections
import datetime
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

import torch
from report import emit_report
from synthetic_set import write_yolo_dataset

MEMORY_COUNTERS = ("num_alloc_retries", "num_device_alloc", "num_device_free", "num_sync_all_streams")
SYNC_EVENTS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpyAsync",
               "cudaMemcpy")


class SyncRecorder:
    """Counts each distinct stack that triggered the sync-debug warning."""

    def __init__(self) -> None:
        self.stacks: collections.Counter[str] = collections.Counter()
        self._previous: Any = None

    def __enter__(self) -> SyncRecorder:
        self._previous = warnings.showwarning

        def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
            if "synchronizing" in str(message):
                frames = [f for f in traceback.extract_stack()[:-1] if "warnings.py" not in f.filename]
                ours = [f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in frames
                        if "libreyolo" in f.filename or "tools" in f.filename][-6:]
                self.stacks[" <- ".join(reversed(ours)) or f"{filename}:{lineno}"] += 1
            else:
                self._previous(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc: object) -> None:
        warnings.showwarning = self._previous


def trainer_part(args: argparse.Namespace, data: Path, project: Path) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    from libreyolo_models import LibreYOLO9

    torch.manual_seed(0)
    model = LibreYOLO9(size=args.size)
    recorder = SyncRecorder()
    state: dict[str, Any] = {}

    def hook(event: Any) -> None:
        name = type(event).__name__
        if name == "EpochEnd" and event.epoch == args.epochs - 3:  # the second-to-last epoch is measured
            torch.cuda.synchronize()
            state["mem0"] = torch.cuda.memory_stats()
            state["prof"] = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
            state["prof"].__enter__()
            recorder.__enter__()
            torch.cuda.set_sync_debug_mode("warn")
            state["t0"] = time.perf_counter()
        elif name == "EpochEnd" and event.epoch == args.epochs - 2 and "prof" in state:
            torch.cuda.set_sync_debug_mode("default")
            recorder.__exit__()
            torch.cuda.synchronize()
            state["wall"] = time.perf_counter() - state["t0"]
            state["prof"].__exit__(None, None, None)
            state["mem1"] = torch.cuda.memory_stats()

    nb = args.images // args.batch
    model.train(data=str(data), epochs=args.epochs, imgsz=args.imgsz, batch=args.batch, device=0, workers=args.workers,
                amp=True, cuda_graph=args.graph, cudnn_benchmark=True, val=False, plots=False, close_mosaic=0, seed=0,
                project=str(project),
                name="probe", verbose=False, callbacks=[hook], exist_ok=True)
    prof = state["prof"]
    events = prof.key_averages()
    kernel_us = sum(e.self_device_time_total for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
    wall_ms = state["wall"] * 1e3 / nb
    lines = [f"## The trainer, {'graphed' if args.graph else 'eager'}: YOLOv9-{args.size}, batch {args.batch}, "
             f"{args.imgsz} px, epoch {args.epochs - 1} of {args.epochs} ({nb} steps and the epoch's end, profiled)", "",
             f"- wall per step (incl. profiler and epoch end): {wall_ms:.1f} ms",
             f"- GPU kernel time per step: {kernel_us / 1e3 / nb:.1f} ms (GPU busy {kernel_us / 1e3 / nb / wall_ms:.0%})",
             "- caching allocator over the epoch: " + ", ".join(
                 f"{k} +{state['mem1'].get(k, 0) - state['mem0'].get(k, 0)}" for k in MEMORY_COUNTERS),
             "", "Synchronising CUDA calls (host waits):", "",
             "| call | count per step | host ms per step |", "|---|---:|---:|"]
    for e in events:
        if e.key in SYNC_EVENTS:
            lines.append(f"| {e.key} | {e.count / nb:.1f} | {e.cpu_time_total / 1e3 / nb:.2f} |")
    lines += ["", f"Stacks that synchronised (sync debug mode; {sum(recorder.stacks.values())} in the epoch):", ""]
    for stack, count in recorder.stacks.most_common(15):
        lines.append(f"- {count / nb:.1f}/step: `{stack}`")
    cpu_rows = sorted((e for e in events if e.device_type == torch.autograd.DeviceType.CPU),
                      key=lambda e: e.self_cpu_time_total, reverse=True)[: args.top]
    lines += ["", f"Top {args.top} host operators by self CPU time:", "",
              "| operator | calls per step | self host ms per step |", "|---|---:|---:|"]
    for e in cpu_rows:
        lines.append(f"| {e.key} | {e.count / nb:.1f} | {e.self_cpu_time_total / 1e3 / nb:.2f} |")
    gpu_rows = sorted((e for e in events if e.device_type == torch.autograd.DeviceType.CUDA),
                      key=lambda e: e.self_device_time_total, reverse=True)[:10]
    lines += ["", "Top 10 GPU kernels:", "", "| kernel | calls per step | GPU ms per step |", "|---|---:|---:|"]
    for e in gpu_rows:
        lines.append(f"| {e.key[:90]} | {e.count / nb:.1f} | {e.self_device_time_total / 1e3 / nb:.2f} |")
    return lines


def bare_step_inputs(size: str, batch: int, imgsz: int) -> tuple[Any, torch.nn.Module, torch.Tensor, Any, Any]:
    """The trainer's step settings without the trainer: (family, net, images, targets, loss
    context) for YOLOv9 ``size`` in training mode, channels_last, cuDNN autotune on."""
    from libreyolo_models import LibreYOLO9
    from libreyolo_models.contract.family import LossContext

    torch.backends.cudnn.benchmark = True
    model = LibreYOLO9(size=size).to(0)
    net = model.net.train().to(memory_format=torch.channels_last)
    images = torch.rand(batch, 3, imgsz, imgsz, device=0).contiguous(memory_format=torch.channels_last)
    targets = model.family.sample_targets(batch, imgsz, torch.Generator().manual_seed(0))
    return model.family, net, images, targets, LossContext(global_batch=batch)


def bare_part(args: argparse.Namespace) -> list[str]:
    """Forward/loss/backward/optimizer on one batch: host issue ms (no sync) vs GPU ms (events)."""
    family, net, images, targets, ctx = bare_step_inputs(args.size, args.batch, args.imgsz)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9, nesterov=True, fused=True)
    scaler = torch.amp.GradScaler("cuda")
    phases = ("forward", "loss", "backward", "optimizer")
    host: dict[str, list[float]] = {p: [] for p in phases}
    gpu: dict[str, list[float]] = {p: [] for p in phases}
    walls = []
    for it in range(args.bare_steps + 10):
        events = [torch.cuda.Event(enable_timing=True) for _ in range(len(phases) + 1)]
        torch.cuda.synchronize()
        start = time.perf_counter()
        marks = [start]
        events[0].record()
        with torch.autocast("cuda", dtype=torch.float16, cache_enabled=False):
            out = family.training_forward(net, images)
            marks.append(time.perf_counter())
            events[1].record()
            loss = family.compute_loss(out, targets, ctx).total
            marks.append(time.perf_counter())
            events[2].record()
        scaler.scale(loss).backward()
        marks.append(time.perf_counter())
        events[3].record()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(net.parameters(), 10.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        marks.append(time.perf_counter())
        events[4].record()
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - start) * 1e3)
        if it >= 10:
            for k, p in enumerate(phases):
                host[p].append((marks[k + 1] - marks[k]) * 1e3)
                gpu[p].append(events[k].elapsed_time(events[k + 1]))
    lines = [f"## The bare eager step (one fixed batch {args.batch}, no data pipeline; medians of {args.bare_steps})", "",
             "| phase | host issue ms | GPU ms (events) |", "|---|---:|---:|"]
    for p in phases:
        lines.append(f"| {p} | {statistics.median(host[p]):.1f} | {statistics.median(gpu[p]):.1f} |")
    lines.append(f"| step wall (synchronised) | {statistics.median(walls[10:]):.1f} | |")
    return lines + [""]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="t")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--imgsz", type=int, default=640)
    p.add_argument("--images", type=int, default=1024, help="more steps per epoch dilute the epoch end in the profile")
    p.add_argument("--epochs", type=int, default=3, help="at least 3: the second-to-last is profiled")
    p.add_argument("--workers", type=int, default=12)
    p.add_argument("--graph", action="store_true", help="profile the graphed trainer instead")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--bare-steps", type=int, default=30)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("probe_train_step needs a CUDA GPU")
    lines = [f"# Training step probe ({datetime.date.today()}, torch {torch.__version__}, "
             f"{torch.cuda.get_device_name(0)})", ""]
    lines += bare_part(args)  # first: nothing of the trainer's (profiler, warning filters) is around yet
    with tempfile.TemporaryDirectory() as tmp:
        data = write_yolo_dataset(Path(tmp) / "data", n_train=args.images, n_val=8, imgsz=args.imgsz)
        lines += trainer_part(args, data, Path(tmp) / "runs")
    emit_report(lines, args.out)


if __name__ == "__main__":
    main()
