"""Train several families from scratch on the bundled ``shapes`` set at once, each a CLI run in
its own process on the same GPU, and report each one's best mAP50 and when it got there.

The issues' learning lines ("a GPU run of each family (320 px) reaching mAP50 >= 0.5 recorded
with its command") are one run per family; run side by side they share the GPU, so their
minutes say nothing about speed (bench_train_e2e.py measures that). A run stopped by its time
limit still reports the epochs it validated (``results.csv`` is written every epoch).

    python tools/learn_families.py --runs dfine:n,yolo7:tiny --epochs 40 --out /tmp/learn.md
    python tools/learn_families.py --runs yolonas:s --set yolonas=lr0=0.002,mosaic=1.0
    python tools/learn_families.py --runs rfdetr:n:segment --set rfdetr-n-segment=imgsz=312   # stride 24

Recipes: each family trains with its own recipe, plus ``FROM_SCRATCH`` (what training without
pretrained weights needs, measured in earlier runs) and the ``--set`` overrides.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime as dt
import importlib
import shutil
import subprocess
import sys
import time
from pathlib import Path

from report import side_by_side_env

ROOT = Path(__file__).resolve().parents[1]

DETR_FROM_SCRATCH = {"lr0": "0.0005"}
"""RT-DETR-r18 reached mAP50 0.990 in 50 epochs at 320 px with lr0 5e-4 from scratch (2026-12-01),
against the recipes' 1e-4 (tuned for pretrained backbones)."""

FROM_SCRATCH: dict[str, dict[str, str]] = {
    "dfine": DETR_FROM_SCRATCH, "deim": DETR_FROM_SCRATCH, "deimv2": DETR_FROM_SCRATCH,
    "rtdetrv2": DETR_FROM_SCRATCH, "rtdetrv4": DETR_FROM_SCRATCH, "rfdetr": DETR_FROM_SCRATCH,
    # EC's recipe trains its ViT backbone at 0.05x, for pretrained weights; EC-s from scratch stood at
    # mAP50 0.42 after 19 epochs beside eleven runs (H200) with it. The CPU tests train it at 1x.
    "ec": {**DETR_FROM_SCRATCH, "backbone_lr_scale": "1.0"},
    # The CPU learning tests' settings (tests/test_yolonas_learns.py, test_gpu_learning.py).
    "yolonas": {"lr0": "0.002", "mosaic": "1.0", "scale": "0.5", "translate": "0.1"},
    "picodet": {"lr0": "0.025", "warmup_bias_lr": "0.025", "mosaic": "1.0", "scale": "0.5", "translate": "0.1"},
    # YOLOv7's nbs 64 at batch 16 steps once per four batches: tiny stood at mAP50 0.43 after 40
    # epochs, and with nbs 16 met 0.5 at epoch 34 (H100, 2026-12-05).
    "yolo7": {"nbs": "16"},
    # The published object weight 100 comes with ImageNet weights; from scratch 20 learned better
    # (tests/test_fomo_learns.py: FOMO-100 at 128 px, 80 epochs, F1 0.854).
    "fomo": {"gains": "obj:20", "nbs": "16"},
}


def parse_sets(values: list[str]) -> dict[str, dict[str, str]]:
    """``family=key=value,key=value`` (repeatable) -> per-family overrides."""
    out: dict[str, dict[str, str]] = {}
    for item in values:
        family, _, rest = item.partition("=")
        pairs = [p.split("=", 1) for p in rest.split(",") if p]
        if not family or any(len(p) != 2 for p in pairs):
            raise SystemExit(f"--set {item!r}: expected family=key=value[,key=value...]")
        out.setdefault(family, {}).update({k: v for k, v in pairs})
    return out


@dataclasses.dataclass(frozen=True)
class TaskRun:
    """What a run of one task trains on and how it is scored from ``results.csv``."""

    data: str                 # the task's bundled set
    ensure: str               # "module:function" generating it (once, before the runs race)
    metric: str               # the results.csv column scored
    target: float             # reached when the score is at least this
    baseline: str = ""        # a column subtracted from the metric (restore: the input's PSNR)


TASKS: dict[str, TaskRun] = {
    "detect": TaskRun("shapes", "libreyolo_models.data.shapes:ensure_shapes", "metrics/mAP50", 0.5),
    "segment": TaskRun("shapes-inst", "libreyolo_models.tasks.segment.shapes_inst:ensure_shapes_inst",
                       "metrics/mAP50(M)", 0.5),
    "pose": TaskRun("shapes-pose", "libreyolo_models.tasks.pose.shapes_pose:ensure_shapes_pose",
                    "metrics/mAP50(P)", 0.5),
    "point": TaskRun("shapes-point", "libreyolo_models.tasks.point.shapes_point:ensure_shapes_point",
                     "metrics/F1", 0.8),
    "restore": TaskRun("shapes-restore", "libreyolo_models.tasks.restore.shapes_restore:ensure_shapes_restore",
                       "metrics/PSNR", 3.0, baseline="metrics/PSNR_input"),
}
"""The issues' learning targets per task: mAP50 0.5 of boxes, masks or poses; centroid F1 0.8;
a PSNR gain of 3 dB over the degraded input."""


def model_name(family: str, size: str) -> str:
    from libreyolo_models.zoo.registry import get_family

    return get_family(family).weight_name(size, suffix=".yaml")


def read_curve(results: Path, run: TaskRun = TASKS["detect"]) -> list[float]:
    """The scored metric of each validated epoch (less the baseline column where there is one)."""
    if not results.is_file():
        return []
    with results.open() as fh:
        rows = [row for row in csv.DictReader(fh) if row.get(run.metric)]
    return [float(row[run.metric]) - (float(row[run.baseline]) if run.baseline else 0.0) for row in rows]


def _parse_run(text: str) -> tuple[str, str, str]:
    parts = text.split(":")
    if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in TASKS):
        raise SystemExit(f"--runs {text!r}: expected family:size or family:size:task, task one of {sorted(TASKS)}")
    return parts[0], parts[1], parts[2] if len(parts) == 3 else "detect"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", required=True,
                        help="family:size[:task],... (e.g. dfine:n,yolo7:tiny,ec:s:segment,fomo:035:point)")
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--imgsz", type=int, default=320)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--device", default="0")
    parser.add_argument("--timeout-s", type=float, default=540, help="per run; a stopped run reports its epochs")
    parser.add_argument("--set", action="append", default=[],
                        help="family=key=value,... or run=key=value,... (run: e.g. rfdetr-n-segment) overrides")
    parser.add_argument("--project", type=Path, default=Path("/tmp/learn-families"))
    parser.add_argument("--target", type=float, default=None, help="default: each task's (TASKS)")
    parser.add_argument("--out", type=Path, default=None, help="also write the markdown table here")
    args = parser.parse_args()
    sets = parse_sets(args.set)
    runs = [_parse_run(r) for r in args.runs.split(",") if r]
    for task in dict.fromkeys(task for _, _, task in runs):  # each set generated once, not raced
        module, _, function = TASKS[task].ensure.partition(":")
        getattr(importlib.import_module(module), function)()
    procs = []
    env = side_by_side_env(len(runs))  # the runs share the CPU cores
    start = time.monotonic()
    for family, size, task in runs:
        name = f"{family}-{size}" + ("" if task == "detect" else f"-{task}")
        options = {"epochs": str(args.epochs), "imgsz": str(args.imgsz), "batch": str(args.batch),
                   "workers": str(args.workers), "device": args.device, **FROM_SCRATCH.get(family, {}),
                   **sets.get(family, {}), **sets.get(name, {})}
        argv = ["train", f"model={model_name(family, size)}", f"task={task}", f"data={TASKS[task].data}",
                f"project={args.project}", f"name={name}", "exist_ok=True", "plots=False",
                *(f"{k}={v}" for k, v in options.items())]
        log = (args.project / f"{name}.log")
        log.parent.mkdir(parents=True, exist_ok=True)
        code = "import sys; from libreyolo_cli.main import main; sys.exit(main(sys.argv[1:]))"
        with log.open("w") as fh:
            proc = subprocess.Popen([sys.executable, "-c", code, *argv], stdout=fh, stderr=subprocess.STDOUT,
                                    env=env, cwd=ROOT)
        procs.append((name, task, argv, proc, log))
    rows = []
    for name, task, argv, proc, log in procs:
        left = max(1.0, args.timeout_s - (time.monotonic() - start))
        try:
            rc: int | str = proc.wait(timeout=left)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
            rc = "stopped at the time limit"
        run = TASKS[task]
        curve = read_curve(args.project / name / "results.csv", run)
        best = max(curve, default=float("nan"))
        target = run.target if args.target is None else args.target
        first = next((i + 1 for i, v in enumerate(curve) if v >= target), None)
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] if rc not in (0,) else []
        score = run.metric + (f" - {run.baseline}" if run.baseline else "")
        rows.append((name, " ".join(argv), rc, len(curve), f"{score} {best:.3f}",
                     f">= {target:g}: {first or 'not reached'}", tail))
    minutes = (time.monotonic() - start) / 60
    where = "the CPU" if args.device == "cpu" else f"device {args.device}"
    lines = [f"Trained side by side on {where}, {dt.date.today()}, {minutes:.1f} min in all; "
             f"`python tools/learn_families.py --runs {args.runs} --epochs {args.epochs}`",
             "", "| run | epochs validated | best score | first epoch at the target | exit | command |",
             "|---|---|---|---|---|---|"]
    for name, command, rc, epochs, score_text, reached, tail in rows:
        note = f"{rc}" + (f" ({tail[0][:120]})" if tail else "")
        lines.append(f"| {name} | {epochs} | {score_text} | {reached} | {note} | "
                     f"`libreyolo {command}` |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
        keep_curves(args.project, [name for name, *_ in rows], args.out.parent / "curves")
    return 0


def keep_curves(project: Path, names: list[str], into: Path) -> None:
    """Each run's ``results.csv`` beside the report (``<name>.csv``): the whole curve, every loss
    and metric per epoch, travels back from the GPU machine with the table."""
    into.mkdir(parents=True, exist_ok=True)
    for name in names:
        source = project / name / "results.csv"
        if source.is_file():
            shutil.copyfile(source, into / f"{name}.csv")


if __name__ == "__main__":
    raise SystemExit(main())
