"""Multi-GPU scaling: training images/s on one GPU vs two at the same per-GPU batch, one run.

Trains YOLOv9 (default s) on a synthetic 640 px YOLO dataset with the real trainer, first with
``device=0`` and per-GPU batch B, then with ``device="0,1"`` and global batch 2B, and reports the
images/s of the epochs after the first, the data-wait share, and the ratio. A data-wait share
near zero means the GPUs set the pace; a large one means the input pipeline does.

    python tools/bench_ddp.py --size s --per-gpu-batch 32 --images 2048 --epochs 2
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
from pathlib import Path

import torch
from bench_train_e2e import read_rows, summarize
from report import emit_report, log
from synthetic_set import write_yolo_dataset


def run(data: Path, project: Path, device: str, batch: int, args: argparse.Namespace) -> list[dict[str, float]]:
    from libreyolo_models import LibreYOLO9

    torch.manual_seed(0)
    model = LibreYOLO9(size=args.size)
    outcome = model.train(data=str(data), epochs=args.epochs, imgsz=args.imgsz, batch=batch, device=device,
                          workers=args.workers, amp=True, val=False, plots=False, close_mosaic=0, seed=0,
                          project=str(project), name=f"gpus{device.replace(',', '')}", verbose=False,
                          sync_bn=args.sync_bn)
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
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    if torch.cuda.device_count() < 2:
        sys.exit(f"bench_ddp.py needs two CUDA GPUs; {torch.cuda.device_count()} visible")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("LIBREYOLO_CACHE_DIR", str(Path(tmp) / "cache"))
        log(f"writing {args.images} synthetic images at {args.imgsz} px ...")
        data = write_yolo_dataset(Path(tmp) / "data", n_train=args.images, n_val=64, imgsz=args.imgsz)
        arms = {}
        for device, batch in (("0", args.per_gpu_batch), ("0,1", 2 * args.per_gpu_batch)):
            log(f"device={device} batch={batch} ...")
            arms[device] = run(data, Path(tmp) / "runs", device, batch, args)
            log(f"    {[round(r['train/images_per_s'], 1) for r in arms[device]]} images/s per epoch")
    one, wait1 = summarize(arms["0"])
    two, wait2 = summarize(arms["0,1"])
    lines = [f"DDP scaling, YOLOv9-{args.size}, {args.imgsz} px, {args.per_gpu_batch} images per GPU, AMP, "
             f"{args.images} images x {args.epochs} epochs (first not timed), sync_bn={args.sync_bn}; {datetime.date.today()}, "
             f"torch {torch.__version__}, {torch.cuda.device_count()}x {torch.cuda.get_device_name(0)}",
             "", "| GPUs | global batch | images/s | data wait |", "|---|---|---|---|",
             f"| 1 | {args.per_gpu_batch} | {one:.0f} | {wait1:.0%} |",
             f"| 2 | {2 * args.per_gpu_batch} | {two:.0f} | {wait2:.0%} |",
             "", f"2-GPU / 1-GPU: {two / one:.2f}x"]
    emit_report(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
