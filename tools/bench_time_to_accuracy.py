"""Time to accuracy on the bundled ``shapes`` set: ours (defaults), ours with ``cuda_graph=True``
and Ultralytics (its defaults), the same epochs allowed, in one invocation.

Each arm trains from scratch at ``--imgsz`` (320) and ``--batch`` (32), validating after every
epoch; the report gives per arm the wall seconds from ``train()`` until validation first reaches
mAP50 >= ``--target`` (0.9), the epoch that did it, the final and best mAP50, the time to the first
step and the whole run's wall time, and the ratio of our times to Ultralytics'. The shapes set is
already a YOLO-format folder with a ``data.yaml`` (``libreyolo_models.data.shapes.ensure_shapes``),
which Ultralytics reads as it is. The peer runs in a subprocess (``tools/peer_ultralytics.py fit``).

    python tools/bench_time_to_accuracy.py --epochs 30
    python tools/bench_time_to_accuracy.py --arms ours,ours-graph --epochs 40   # no peer
    python tools/bench_time_to_accuracy.py --arms ultralytics --epochs 40
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from peer_ultralytics import run_peer
from report import emit_report, log

ARMS = ("ours", "ours-graph", "ultralytics")

# Imported once in a throwaway process before any arm: every arm then starts with the compiled
# bytecode a pip install leaves (pip compiles it; the lent GPU machine's environment has none for
# torch, torch._dynamo or sympy, so whichever arm ran first paid seconds of compiling for all).
WARM_IMPORTS = ("torch", "torch._dynamo", "torchvision.ops", "sympy", "matplotlib.pyplot",
                "libreyolo_models.train.trainer", "libreyolo_models.tasks", "ultralytics.models.yolo.detect")


def warm_bytecode() -> float:
    """Seconds spent importing ``WARM_IMPORTS`` in a subprocess (a missing one is skipped)."""
    import subprocess

    code = "import importlib\n" + "".join(
        f"try:\n    importlib.import_module({name!r})\nexcept Exception:\n    pass\n" for name in WARM_IMPORTS)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=600, check=False)
    return time.perf_counter() - t0


@dataclass
class Curve:
    """Per-epoch (wall seconds since train(), mAP50) of one arm, and what the run said besides."""

    epochs: list[tuple[float, float]] = field(default_factory=list)
    phases: list[tuple[float, float, float]] = field(default_factory=list)  # ours: train, val, save s per epoch
    first_step_s: float = float("nan")
    first_step_parts: dict[str, float] = field(default_factory=dict)  # ours: where the time to it went
    wall_s: float = float("nan")
    note: str = ""

    def reached(self, target: float) -> tuple[int, float] | None:
        """(1-based epoch, wall seconds) of the first validation at or above ``target``."""
        for i, (wall, map50) in enumerate(self.epochs):
            if map50 >= target:
                return i + 1, wall
        return None


def run_ours(data: str, project: Path, *, graph: bool, args: argparse.Namespace) -> Curve:
    from libreyolo_models import LibreYOLO9
    from libreyolo_models.train.callbacks import EpochEnd, TrainStart

    torch.manual_seed(0)
    model = LibreYOLO9(size=args.size)
    curve = Curve()
    started = time.perf_counter()

    setup = {"s": float("nan")}

    def record(event: object) -> None:
        if isinstance(event, TrainStart):
            setup["s"] = time.perf_counter() - started
            # Not in a timed phase: the facade's plan, seeding, backend flags, the autotune choice.
            curve.first_step_parts["untimed"] = setup["s"] - sum(event.setup_s.values())
            curve.first_step_parts.update(event.setup_s)
        if isinstance(event, EpochEnd):
            row = event.metrics
            curve.epochs.append((time.perf_counter() - started, float(row.get("metrics/mAP50", float("nan")))))
            train_s, val_s, save_s = (float(row.get(k, float("nan"))) for k in
                                      ("train/epoch_s", "time/val_s", "time/save_s"))
            curve.phases.append((train_s, val_s, save_s))
            if len(curve.epochs) == 1:  # setup, then the first epoch up to its first step's end
                first, data = (float(row.get(k, float("nan"))) for k in ("train/first_step_s", "train/first_data_s"))
                curve.first_step_s = setup["s"] + first
                curve.first_step_parts.update({"first batch": data, "first step": first - data})

    model.train(data=data, epochs=args.epochs, imgsz=args.imgsz, batch=args.batch, device=0, cuda_graph=graph,
                seed=0, plots=False, verbose=False, project=str(project), name="graph" if graph else "eager",
                callbacks=[record])
    curve.wall_s = time.perf_counter() - started
    return curve


def run_peer_arm(data: str, args: argparse.Namespace) -> Curve:
    peer = run_peer("fit", timeout_s=args.peer_timeout, data=data, model=f"yolov9{args.size}.yaml",
                    imgsz=args.imgsz, batch=args.batch, epochs=args.epochs, device="0", workers=args.workers)
    if "epochs" not in peer:
        return Curve(note=f"not run: {peer.get('skipped') or peer.get('error')}")
    first = peer.get("first_step_s") or float("nan")
    return Curve(epochs=[(e["wall_s"], e["mAP50"]) for e in peer["epochs"]], first_step_s=first,
                 first_step_parts=peer_first_step_parts(peer.get("milestones") or {}, first),
                 wall_s=peer.get("wall_s", float("nan")),
                 note=f"ended with {peer['ended_with']}" if peer.get("ended_with") else "")


PEER_MILESTONES = (("on_pretrain_routine_start", "before setup"), ("on_pretrain_routine_end", "setup"),
                   ("on_train_start", "after setup"), ("on_train_batch_start", "first batch"))


def peer_first_step_parts(milestones: dict[str, float], first_step_s: float) -> dict[str, float]:
    """Ultralytics' time to its first step, split at its callbacks (seconds between them)."""
    parts, previous = {}, 0.0
    for key, name in PEER_MILESTONES:
        if key in milestones:
            parts[name] = milestones[key] - previous
            previous = milestones[key]
    if parts and not math.isnan(first_step_s):
        parts["first step (launched, not synchronised)"] = first_step_s - previous
    return parts


def report(curves: dict[str, Curve], args: argparse.Namespace) -> list[str]:
    target = args.target
    lines = [f"Time to mAP50 >= {target} on shapes (400 train / 100 val images), YOLOv9-{args.size}, {args.imgsz} px, "
             f"batch {args.batch}, at most {args.epochs} epochs, validation every epoch; {datetime.date.today()}, "
             f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}; shared libraries' bytecode compiled "
             "before any arm (WARM_IMPORTS)", "",
             f"| arm | s to mAP50 >= {target} | epoch | final mAP50 | best mAP50 | first step s | run wall s | "
             "vs Ultralytics (time to target) |", "|---|---|---|---|---|---|---|---|"]
    peer = curves.get("ultralytics")
    peer_hit = peer.reached(target) if peer else None
    for arm, curve in curves.items():
        if not curve.epochs:
            lines.append(f"| {arm} | {curve.note} | | | | | | |")
            continue
        hit = curve.reached(target)
        final = curve.epochs[-1][1]
        best = max(m for _, m in curve.epochs if not math.isnan(m)) if any(
            not math.isnan(m) for _, m in curve.epochs) else float("nan")
        ratio = f"{hit[1] / peer_hit[1]:.2f}x" if hit and peer_hit else "-"
        lines.append(f"| {arm} | {f'{hit[1]:.1f}' if hit else 'not reached'} | {hit[0] if hit else '-'} | "
                     f"{final:.3f} | {best:.3f} | {curve.first_step_s:.1f} | {curve.wall_s:.1f} | {ratio} |")
    phases = []
    for arm, curve in curves.items():
        if curve.phases:  # where an epoch's wall time goes (the peer does not say)
            n = len(curve.phases)
            train, val, save = (sum(p[i] for p in curve.phases) / n for i in range(3))
            per_epoch = (curve.epochs[-1][0] - curve.epochs[0][0]) / max(n - 1, 1)
            phases.append(f"- {arm}: per epoch (mean of {n}) train {train:.2f} s, validation {val:.2f} s, "
                          f"checkpoints {save:.2f} s; wall between epoch ends {per_epoch:.2f} s")
    lines += ["", *phases] if phases else []
    parts = [f"- {arm}: {curve.first_step_s:.1f} s = " + ", ".join(f"{k} {v:.2f}" for k, v in curve.first_step_parts.items())
             for arm, curve in curves.items() if curve.first_step_parts]
    lines += ["", "Time to the first step's end, by phase (s; the trainer's setup phases, then the first "
              "batch's wait and the first step):", *parts] if parts else []
    lines += ["", "Per-epoch mAP50 (wall s):"]
    for arm, curve in curves.items():
        shown = ", ".join(f"{m:.2f} ({w:.0f})" for w, m in curve.epochs)
        lines.append(f"- {arm}: {shown or curve.note}" + (f"; {curve.note}" if curve.note and curve.epochs else ""))
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of {', '.join(ARMS)}")
    p.add_argument("--size", default="t")
    p.add_argument("--imgsz", type=int, default=320)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--epochs", type=int, default=30, help="the most each arm may train")
    p.add_argument("--target", type=float, default=0.9, help="mAP50 to reach")
    p.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1), help="the peer's loader workers")
    p.add_argument("--peer-timeout", type=float, default=540.0, help="seconds before the peer is abandoned")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    arms = [a for a in args.arms.split(",") if a]
    if unknown := set(arms) - set(ARMS):
        sys.exit(f"--arms: unknown {sorted(unknown)}; choose from {', '.join(ARMS)}")
    if not torch.cuda.is_available():
        sys.exit("bench_time_to_accuracy.py needs a CUDA GPU")
    import tempfile

    from libreyolo_models.data.shapes import ensure_shapes

    data = str(ensure_shapes())
    log(f"bytecode warmed for all arms in {warm_bytecode():.1f} s (imports of {', '.join(WARM_IMPORTS)})")
    curves: dict[str, Curve] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for arm in arms:
            log(f"{arm}: up to {args.epochs} epochs ...")
            curves[arm] = (run_peer_arm(data, args) if arm == "ultralytics"
                           else run_ours(data, Path(tmp), graph=arm == "ours-graph", args=args))
            log(f"    {[round(m, 3) for _, m in curves[arm].epochs]} {curves[arm].note}")
            if args.out is not None:  # a time-out keeps the arms that finished
                args.out.write_text("\n".join(report(curves, args)) + "\n")
    emit_report(report(curves, args), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
