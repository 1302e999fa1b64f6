"""The user-level CUDA-graph training check: ``libreyolo train`` on the bundled shapes set, eager
and with ``--cuda-graph``, from the same seed; wall time, per-epoch losses and final mAP compared.

    python tools/shapes_graph_run.py --epochs 20 --imgsz 640 --batch 16
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from report import emit_report

KEYS = ("train/box_loss", "train/cls_loss", "train/dfl_loss")


def run(project: Path, graph: bool, args: argparse.Namespace) -> tuple[float, list[dict[str, str]]]:
    cmd = [sys.executable, "-m", "libreyolo_cli.main", "train", "model=LibreYOLO9t.yaml", "data=shapes",
           f"epochs={args.epochs}", f"imgsz={args.imgsz}", f"batch={args.batch}", "device=0", "seed=0",
           "deterministic=true", f"project={project}", f"name={'graph' if graph else 'eager'}", "plots=false"]
    if graph:
        cmd.append("--cuda-graph")
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    print([ln for ln in proc.stderr.splitlines() if "cuda_graph" in ln], file=sys.stderr)
    with (project / ("graph" if graph else "eager") / "results.csv").open() as fh:
        return wall, list(csv.DictReader(fh))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--imgsz", type=int, default=640)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("shapes_graph_run.py needs a CUDA GPU (it trains with device=0)")
    with tempfile.TemporaryDirectory() as tmp:
        eager_s, eager = run(Path(tmp), False, args)
        graph_s, graph = run(Path(tmp), True, args)
    same = all(a[k] == b[k] for a, b in zip(eager, graph) for k in KEYS) and len(eager) == len(graph)
    fin_e, fin_g = eager[-1], graph[-1]
    lines = [f"YOLOv9-t on shapes, {args.epochs} epochs, {args.imgsz} px, batch {args.batch}, AMP, deterministic; "
             f"{datetime.date.today()}, torch {torch.__version__}, {torch.cuda.get_device_name(0)}",
             "", "| run | wall s | train s (sum of epochs) | final mAP50 | final mAP50-95 |", "|---|---|---|---|---|"]
    for name, wall, rows in (("eager", eager_s, eager), ("--cuda-graph", graph_s, graph)):
        train_s = sum(float(r["train/epoch_s"]) for r in rows)
        lines.append(f"| {name} | {wall:.0f} | {train_s:.1f} | {rows[-1]['metrics/mAP50']} | {rows[-1]['metrics/mAP50-95']} |")
    train_ratio = sum(float(r["train/epoch_s"]) for r in eager) / sum(float(r["train/epoch_s"]) for r in graph)
    lines += ["", f"per-epoch losses identical: {'yes' if same else 'no'}; final mAP identical: "
              f"{'yes' if fin_e['metrics/mAP50-95'] == fin_g['metrics/mAP50-95'] else 'no'}; "
              f"speedup wall {eager_s / graph_s:.2f}x, training loop {train_ratio:.2f}x"]
    if not same:
        for a, b in zip(eager, graph):
            lines.append(f"- epoch {a['epoch']}: eager {[a[k] for k in KEYS]} / graph {[b[k] for k in KEYS]}")
    emit_report(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
