"""Multi-GPU scaling: training images/s on one GPU vs two at the same per-GPU batch, one run.

Trains YOLOv9 (default s) on a synthetic 640 px YOLO dataset with the real trainer on one GPU
(``device=0``, batch B) and two (``device="0,1"``, global batch 2B), eagerly and with
``cuda_graph=True`` (SyncBatchNorm as the family declares: on for YOLOv9), and Ultralytics' YOLOv9
of the same size on one and two GPUs on the same data in the same invocation
(``tools/peer_ultralytics.py``). Reports the images/s of the epochs after the first, the
data-wait share and the ratios. A data-wait share near zero means the GPUs set the pace.

    python tools/bench_ddp.py --size s --per-gpu-batch 32 --images 2048 --epochs 3
    python tools/bench_ddp.py --arms eager1,eager2,graph1,graph2 --no-peer
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from bench_train_e2e import ArmResult, read_rows
from peer_ultralytics import run_peer
from report import emit_report, log
from synthetic_set import write_yolo_dataset

ARMS = {"eager1": ("0", False), "eager2": ("0,1", False), "graph1": ("0", True), "graph2": ("0,1", True)}


def run(data: Path, project: Path, arm: str, args: argparse.Namespace) -> list[dict[str, float]]:
    from libreyolo_models import LibreYOLO9
    from libreyolo_models.train.trainer import TrainOutcome

    device, graph = ARMS[arm]
    batch = args.per_gpu_batch * len(device.split(","))
    torch.manual_seed(0)
    model = LibreYOLO9(size=args.size)
    outcome: TrainOutcome = model.train(
        data=str(data), epochs=args.epochs, imgsz=args.imgsz, batch=batch, device=device, workers=args.workers,
        amp=True, val=False, plots=False, close_mosaic=0, seed=0, project=str(project), name=arm, verbose=False,
        sync_bn=args.sync_bn, cuda_graph=graph, profile=args.profile and device == "0",
        cudnn_benchmark=True)  # as a long run would
    return read_rows(outcome.run_dir)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="s")
    p.add_argument("--per-gpu-batch", type=int, default=32)
    p.add_argument("--images", type=int, default=2048)
    p.add_argument("--imgsz", type=int, default=640)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--workers", type=int, default=None, help="per rank (default: from the CPU count)")
    p.add_argument("--sync-bn", action=argparse.BooleanOptionalAction, default=None,
                   help="SyncBatchNorm under DDP (default: the family's, on for YOLOv9)")
    p.add_argument("--arms", default="eager1,eager2,graph1,graph2")
    p.add_argument("--peer", action=argparse.BooleanOptionalAction, default=True,
                   help="also train Ultralytics on one and two GPUs on the same data in this run")
    p.add_argument("--profile", action="store_true", help="per-phase step times for the one-GPU arms")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    if unknown := [a for a in args.arms.split(",") if a not in ARMS]:
        sys.exit(f"--arms: unknown {unknown}; choose from {', '.join(ARMS)}")
    if torch.cuda.device_count() < 2:
        sys.exit(f"bench_ddp.py needs two CUDA GPUs; {torch.cuda.device_count()} visible")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("LIBREYOLO_CACHE_DIR", str(Path(tmp) / "cache"))
        log(f"writing {args.images} synthetic images at {args.imgsz} px ...")
        data = write_yolo_dataset(Path(tmp) / "data", n_train=args.images, n_val=64, imgsz=args.imgsz)
        arms: dict[str, tuple[float, float]] = {}
        for arm in args.arms.split(","):
            log(f"arm {arm} ...")
            rows = run(data, Path(tmp) / "runs", arm, args)
            result = ArmResult(rows)  # its rates: the epochs after the first
            arms[arm] = (result.images_per_s(), result.data_wait())
            log(f"    {[round(r['train/images_per_s'], 1) for r in rows]} images/s per epoch")
        peers: dict[str, dict[str, Any]] = {}
        for gpus, device in ((1, "0"), (2, "0,1")) if args.peer else ():
            log(f"peer: Ultralytics on {gpus} GPU(s) ...")
            peers[f"ultralytics{gpus}"] = run_peer(
                "train", data=str(data), model=f"yolov9{args.size}.yaml", imgsz=args.imgsz,
                batch=args.per_gpu_batch * gpus, epochs=max(args.epochs, 3), device=device,
                workers=args.workers or 8, images=args.images)
            log(f"    {peers[f'ultralytics{gpus}']}")
    lines = [f"DDP scaling, YOLOv9-{args.size}, {args.imgsz} px, {args.per_gpu_batch} images per GPU, AMP, "
             f"{args.images} images x {args.epochs} epochs (first not timed), sync_bn={args.sync_bn} (None: the "
             f"family's); {datetime.date.today()}, torch {torch.__version__}, {torch.cuda.device_count()}x "
             f"{torch.cuda.get_device_name(0)}",
             "", "| arm | GPUs | images/s | data wait |", "|---|---|---|---|"]
    for arm, (ips, wait) in arms.items():
        lines.append(f"| ours {arm[:-1]} | {arm[-1]} | {ips:.0f} | {wait:.0%} |")
    for name, peer in peers.items():
        shown = f"{peer['images_per_s']:.0f}" if "images_per_s" in peer else f"not run: {peer}"
        lines.append(f"| Ultralytics | {name[-1]} | {shown} | - |")
    rate = {k: v[0] for k, v in arms.items()}
    rate.update({k: v["images_per_s"] for k, v in peers.items() if "images_per_s" in v})
    lines.append("")
    for a, b, what in (("eager2", "eager1", "eager 2 GPUs / 1 GPU"), ("graph2", "graph1", "graphed 2 GPUs / 1 GPU"),
                       ("graph2", "ultralytics2", "graphed 2 GPUs / Ultralytics 2 GPUs"),
                       ("eager2", "ultralytics2", "eager 2 GPUs / Ultralytics 2 GPUs"),
                       ("ultralytics2", "ultralytics1", "Ultralytics 2 GPUs / 1 GPU")):
        if a in rate and b in rate:
            lines.append(f"- {what}: {rate[a] / rate[b]:.2f}x")
    emit_report(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
