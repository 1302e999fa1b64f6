"""Train several families from scratch on the bundled ``shapes`` set at once, each a CLI run in
its own process on the same GPU, and report each one's best mAP50 and when it got there.

The issues' learning lines ("a GPU run of each family (320 px) reaching mAP50 >= 0.5 recorded
with its command") are one run per family; run side by side they share the GPU, so their
minutes say nothing about speed (bench_train_e2e.py measures that). A run stopped by its time
limit still reports the epochs it validated (``results.csv`` is written every epoch).

    python tools/learn_families.py --runs dfine:n,yolo7:tiny --epochs 40 --out /tmp/learn.md
    python tools/learn_families.py --runs yolonas:s --set yolonas=lr0=0.002,mosaic=1.0

Recipes: each family trains with its own recipe, plus ``FROM_SCRATCH`` (what training without
pretrained weights needs, measured in earlier runs) and the ``--set`` overrides.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

DETR_FROM_SCRATCH = {"lr0": "0.0005"}
"""RT-DETR-r18 reached mAP50 0.990 in 50 epochs at 320 px with lr0 5e-4 from scratch (2026-12-01),
against the recipes' 1e-4 (tuned for pretrained backbones)."""

FROM_SCRATCH: dict[str, dict[str, str]] = {
    "dfine": DETR_FROM_SCRATCH, "deim": DETR_FROM_SCRATCH, "deimv2": DETR_FROM_SCRATCH,
    "rtdetrv2": DETR_FROM_SCRATCH, "rtdetrv4": DETR_FROM_SCRATCH, "rfdetr": DETR_FROM_SCRATCH,
    "ec": DETR_FROM_SCRATCH,
    # The CPU learning tests' settings (tests/test_yolonas_learns.py, test_gpu_learning.py).
    "yolonas": {"lr0": "0.002", "mosaic": "1.0", "scale": "0.5", "translate": "0.1"},
    "picodet": {"lr0": "0.025", "warmup_bias_lr": "0.025", "mosaic": "1.0", "scale": "0.5", "translate": "0.1"},
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


def model_name(family: str, size: str) -> str:
    from libreyolo_models.zoo.registry import get_family

    return get_family(family).weight_name(size, suffix=".yaml")


def read_curve(results: Path) -> list[float]:
    if not results.is_file():
        return []
    with results.open() as fh:
        return [float(row["metrics/mAP50"]) for row in csv.DictReader(fh) if row.get("metrics/mAP50")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", required=True, help="family:size,... (e.g. dfine:n,yolo7:tiny)")
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--imgsz", type=int, default=320)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--device", default="0")
    parser.add_argument("--timeout-s", type=float, default=540, help="per run; a stopped run reports its epochs")
    parser.add_argument("--set", action="append", default=[], help="family=key=value,... overrides (repeatable)")
    parser.add_argument("--project", type=Path, default=Path("/tmp/learn-families"))
    parser.add_argument("--target", type=float, default=0.5)
    parser.add_argument("--out", type=Path, default=None, help="also write the markdown table here")
    args = parser.parse_args()
    sets = parse_sets(args.set)
    runs = [tuple(r.split(":", 1)) for r in args.runs.split(",") if r]
    procs = []
    start = time.monotonic()
    for family, size in runs:
        options = {"epochs": str(args.epochs), "imgsz": str(args.imgsz), "batch": str(args.batch),
                   "workers": str(args.workers), "device": args.device, **FROM_SCRATCH.get(family, {}),
                   **sets.get(family, {})}
        name = f"{family}-{size}"
        argv = ["train", f"model={model_name(family, size)}", "data=shapes", f"project={args.project}",
                f"name={name}", "exist_ok=True", "plots=False", *(f"{k}={v}" for k, v in options.items())]
        log = (args.project / f"{name}.log")
        log.parent.mkdir(parents=True, exist_ok=True)
        code = "import sys; from libreyolo_cli.main import main; sys.exit(main(sys.argv[1:]))"
        with log.open("w") as fh:
            proc = subprocess.Popen([sys.executable, "-c", code, *argv], stdout=fh, stderr=subprocess.STDOUT,
                                    env=os.environ.copy(), cwd=ROOT)
        procs.append((name, argv, proc, log))
    rows = []
    for name, argv, proc, log in procs:
        left = max(1.0, args.timeout_s - (time.monotonic() - start))
        try:
            rc: int | str = proc.wait(timeout=left)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
            rc = "stopped at the time limit"
        curve = read_curve(args.project / name / "results.csv")
        best = max(curve, default=float("nan"))
        first = next((i + 1 for i, v in enumerate(curve) if v >= args.target), None)
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] if rc not in (0,) else []
        rows.append((name, " ".join(argv), rc, len(curve), best, first, tail))
    minutes = (time.monotonic() - start) / 60
    lines = [f"Trained side by side on one GPU, {dt.date.today()}, {minutes:.1f} min in all; "
             f"`python tools/learn_families.py --runs {args.runs} --epochs {args.epochs}`",
             "", f"| run | epochs validated | best mAP50 | first epoch >= {args.target} | exit | command |",
             "|---|---|---|---|---|---|"]
    for name, command, rc, epochs, best, first, tail in rows:
        note = f"{rc}" + (f" ({tail[0][:120]})" if tail else "")
        lines.append(f"| {name} | {epochs} | {best:.3f} | {first or 'not reached'} | {note} | "
                     f"`libreyolo {command}` |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
