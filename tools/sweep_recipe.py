#!/usr/bin/env python
"""Train one model under several recipes side by side and tabulate the accuracy each reached.

Every configuration is ``--base`` updated by one point of ``--grid`` (the cartesian product of its
lists) and runs ``model.train(**config)`` in its own process, ``--parallel`` at a time (one GPU
holds several small runs). The table gives, per configuration, the metric after each epoch
(``--metric``, from the run's ``results.csv``), the best epoch and the wall time, so a learning
test's budget and target can be set from measurements instead of guesses.

    python tools/sweep_recipe.py --model LibreSegFormerb0.yaml --data shapes-seg --metric metrics/mIoU \\
        --base '{"epochs": 60, "imgsz": 128, "batch": 16, "device": 0}' --grid '{"lr0": [1e-3, 3e-3]}'
"""

from __future__ import annotations

import argparse
import csv
import datetime
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from report import emit_report, log

CHILD = """
import json, sys
from libreyolo_models import LibreYOLO
config = json.loads(sys.argv[1])
model = LibreYOLO(config.pop("model"))
outcome = model.train(**config)
print("RUN_DIR=" + str(outcome.run_dir))
"""


def configurations(base: dict[str, Any], grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    keys = list(grid)
    return [{**base, **dict(zip(keys, values))} for values in itertools.product(*(grid[k] for k in keys))] or [base]


def run_one(index: int, config: dict[str, Any], args: argparse.Namespace, project: Path) -> dict[str, Any]:
    full = {"model": args.model, "data": args.data, "project": str(project), "name": f"c{index}", "verbose": False,
            "plots": False, **config}
    started = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(full)], capture_output=True, text=True,
                              timeout=args.timeout, env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})
        out, rc = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as err:  # text=True: what it printed is a str (bytes only in its type)
        printed = err.stdout.decode(errors="replace") if isinstance(err.stdout, bytes) else err.stdout or ""
        out, rc = f"timed out after {args.timeout} s; {printed}", -1
    wall = time.perf_counter() - started
    run_dir = project / f"c{index}"
    curve: list[float] = []
    results = run_dir / "results.csv"
    if results.is_file():
        with results.open() as fh:
            curve = [float(row[args.metric]) for row in csv.DictReader(fh) if row.get(args.metric)]
    log(f"config {index} rc={rc} {wall:.0f}s {args.metric}: {curve[-1:] or 'none'}")
    if rc != 0:
        log(out[-2000:])
    return {"config": config, "curve": curve, "wall": wall, "rc": rc}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--metric", default="metrics/mAP50")
    p.add_argument("--base", default="{}", help="JSON options every configuration shares")
    p.add_argument("--grid", default="{}", help="JSON: option -> list of values (cartesian product)")
    p.add_argument("--parallel", type=int, default=4)
    p.add_argument("--threads", type=int, default=2, help="OMP threads per run")
    p.add_argument("--timeout", type=float, default=540)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    base, grid = json.loads(args.base), json.loads(args.grid)
    configs = configurations(base, grid)
    log(f"{len(configs)} configurations, {args.parallel} at a time")
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.parallel) as pool:
        rows = list(pool.map(lambda ic: run_one(ic[0], ic[1], args, Path(tmp)), enumerate(configs)))
    varied = list(grid)
    lines = [f"# Recipe sweep: {args.model} on {args.data} ({datetime.date.today()})", "",
             f"Shared: `{json.dumps(base)}`; {args.parallel} runs at a time on one machine.", "",
             "| " + " | ".join(varied) + f" | final {args.metric} | best (epoch) | wall s | per epoch |",
             "|" + "---|" * (len(varied) + 4)]
    for row in rows:
        curve = row["curve"]
        best = max(range(len(curve)), key=curve.__getitem__) if curve else None
        values = " | ".join(str(row["config"][k]) for k in varied)
        per_epoch = ", ".join(f"{v:.3f}" for v in curve) if curve else f"failed (rc {row['rc']})"
        lines.append(f"| {values} | {curve[-1]:.3f} | {curve[best]:.3f} ({best + 1}) | {row['wall']:.0f} | {per_epoch} |"
                     if curve and best is not None else f"| {values} | - | - | {row['wall']:.0f} | {per_epoch} |")
    emit_report(lines, args.out)


if __name__ == "__main__":
    main()
