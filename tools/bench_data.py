"""Images/s of the training data pipeline alone: the CPU path against the GPU path.

Builds a synthetic set of JPEGs with boxes (default 512 at 640 px) in a temporary folder, then
for each arm runs one warm epoch (the image cache is built or found, workers start) and times
full epochs after it. Every batch is delivered to the device, as a trainer would receive it; no
model runs. Prints one table row per arm and the GPU/CPU ratio; progress goes to stderr.

    python tools/bench_data.py                      # both arms when CUDA exists, else the CPU arm
    python tools/bench_data.py --workers 16 --batch 64 --epochs 3

Arms:
  cpu   TrainPipeline(gpu_augment=False): workers decode nothing (the cache did) but warp, colour
        and flip every sample, and ship uint8 images.
  gpu   TrainPipeline(gpu_augment=True): workers copy cached tiles out of the memory map; the
        device renders the whole batch.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
from synthetic_set import write_images

from libreyolo_models.data.pipeline import AugmentConfig, TrainPipeline
from libreyolo_models.data.split_index import SplitIndex


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def build_synthetic_split(folder: Path, count: int, imgsz: int) -> SplitIndex:
    """``count`` JPEGs (landscape and portrait, ``imgsz`` long side) with 2-8 boxes each."""
    made = write_images(folder, count, imgsz)
    return SplitIndex(
        "train",
        [m[0] for m in made],
        [m[1] for m in made],
        [m[2] for m in made],
        {k: f"class{k}" for k in range(5)},
        source="tools/bench_data.py synthetic set",
    )


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_arm(
    index: SplitIndex, *, gpu_augment: bool, device: torch.device, args: argparse.Namespace
) -> dict[str, float]:
    """Warm epoch, then timed epochs; returns images/s and ms per batch over the timed epochs."""
    pipeline = TrainPipeline(
        index,
        imgsz=args.imgsz,
        batch_size=args.batch,
        device=device,
        augment=AugmentConfig(),
        workers=args.workers,
        seed=0,
        gpu_augment=gpu_augment,
        cache=args.cache,
    )
    cache_file = pipeline.cache.path
    try:
        images, seconds, batches = 0, 0.0, 0
        for epoch in range(args.epochs + 1):
            pipeline.set_epoch(epoch, mosaic=True)
            _sync(device)
            start = time.perf_counter()
            seen = 0
            for batch in pipeline:
                seen += len(batch.images)
            _sync(device)
            elapsed = time.perf_counter() - start
            label = "warm" if epoch == 0 else f"epoch {epoch}"
            _log(
                f"  {'gpu' if gpu_augment else 'cpu'} arm, {label}: {seen} images in {elapsed:.2f} s "
                f"({seen / elapsed:.0f} images/s)"
            )
            if epoch > 0:
                images, seconds, batches = images + seen, seconds + elapsed, batches + len(pipeline)
        return {"images_per_s": images / seconds, "ms_per_batch": 1000 * seconds / batches}
    finally:
        del pipeline
        if not args.keep:  # a /dev/shm cache would otherwise hold RAM until reboot
            cache_file.unlink(missing_ok=True)
            cache_file.with_name(cache_file.name + ".lock").unlink(missing_ok=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--images", type=int, default=512, help="synthetic images (default 512)")
    parser.add_argument("--imgsz", type=int, default=640, help="image and network size (default 640)")
    parser.add_argument("--batch", type=int, default=32, help="batch size (default 32)")
    parser.add_argument(
        "--workers",
        type=int,
        default=min(8, os.cpu_count() or 1),
        help="DataLoader workers for both arms (default min(8, cpu count))",
    )
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs after the warm one (default 2)")
    parser.add_argument("--arms", default="cpu,gpu", help="comma-separated: cpu, gpu (gpu needs CUDA)")
    parser.add_argument("--cache", choices=("ram", "disk", "auto"), default="auto", help="image cache place")
    parser.add_argument("--keep", action="store_true", help="keep the image cache file afterwards")
    args = parser.parse_args()

    has_cuda = torch.cuda.is_available()
    device = torch.device("cuda", torch.cuda.current_device()) if has_cuda else torch.device("cpu")
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if "gpu" in arms and not has_cuda:
        _log("no CUDA device: skipping the gpu arm")
        arms.remove("gpu")
    with tempfile.TemporaryDirectory(prefix="libreyolo-bench-data-") as tmp:
        os.environ.setdefault("LIBREYOLO_CACHE_DIR", str(Path(tmp) / "cache"))
        start = time.perf_counter()
        index = build_synthetic_split(Path(tmp) / "images", args.images, args.imgsz)
        _log(
            f"wrote {len(index)} synthetic JPEGs ({index.n_instances()} boxes) in "
            f"{time.perf_counter() - start:.1f} s"
        )
        results = {}
        for arm in arms:
            _log(f"{arm} arm: batch {args.batch}, {args.workers} workers, {args.imgsz} px, on {device}")
            results[arm] = run_arm(index, gpu_augment=arm == "gpu", device=device, args=args)

    gpu_name = torch.cuda.get_device_name(device) if has_cuda else "none"
    print(
        f"bench_data: {args.images} images at {args.imgsz} px, batch {args.batch}, {args.workers} workers, "
        f"{args.epochs} timed epochs, torch {torch.__version__}, {os.cpu_count()} CPUs, GPU {gpu_name}"
    )
    print(f"{'arm':<6}{'images/s':>12}{'ms/batch':>12}")
    for arm, r in results.items():
        print(f"{arm:<6}{r['images_per_s']:>12.1f}{r['ms_per_batch']:>12.1f}")
    if "cpu" in results and "gpu" in results:
        print(f"ratio gpu/cpu: {results['gpu']['images_per_s'] / results['cpu']['images_per_s']:.2f}x")


if __name__ == "__main__":
    main()
