"""Images/s of the training data pipeline alone: the CPU path against the GPU path.

Builds a synthetic set of JPEGs with boxes (default 512 at 640 px) in a temporary folder, then
for each arm runs one warm epoch (the image cache is built or found, workers start) and times
full epochs after it. Every batch is delivered to the device, as a trainer would receive it; no
model runs. Prints one table row per arm and the GPU/CPU ratio; progress goes to stderr.

    python tools/bench_data.py                      # every arm when CUDA exists, else the CPU arm
    python tools/bench_data.py --workers 16 --batch 64 --epochs 3
    python tools/bench_data.py --worker-cost --images 128   # what one worker spends per sample (CPU is enough)

Arms:
  cpu       TrainPipeline(gpu_augment=False): workers decode nothing (the cache did) but warp, colour
            and flip every sample, and ship uint8 images.
  gpu       TrainPipeline(gpu_augment=True, cache=--cache): workers copy cached tiles out of the
            memory map and ship them; the device renders the whole batch.
  resident  TrainPipeline(gpu_augment=True, cache="gpu"): the images were uploaded to the device
            once; workers ship tile indices, draws and targets; the device gathers and renders.

``--worker-cost`` times, in this process, what a DataLoader worker runs per batch of each arm
(``__getitems__``/``__getitem__``, with batches in shared memory as a worker makes them, but not
the hand-over to the main process), and sums the bytes of tensors it hands back: the per-sample cost and payload of each arm. It needs
no GPU (the resident arm keeps its copy in RAM then).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import torch
from report import log
from synthetic_set import write_images

from libreyolo_models.data import collate
from libreyolo_models.data.split_index import SplitIndex
from libreyolo_models.tasks.detect.pipeline import AugmentConfig, TrainPipeline


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


def make_pipeline(index: SplitIndex, arm: str, device: torch.device, args: argparse.Namespace,
                  workers: int) -> TrainPipeline:
    return TrainPipeline(
        index,
        imgsz=args.imgsz,
        batch_size=args.batch,
        device=device,
        augment=AugmentConfig(),
        workers=workers,
        seed=0,
        gpu_augment=arm != "cpu",
        cache="gpu" if arm == "resident" else args.cache,
    )


def _tensor_bytes(value: object) -> int:
    """Bytes of every tensor in a (nested) batch object: what crosses from a worker."""
    if isinstance(value, torch.Tensor):
        return value.nbytes
    if dataclasses.is_dataclass(value):
        return sum(_tensor_bytes(getattr(value, f.name)) for f in dataclasses.fields(value))
    if isinstance(value, list | tuple):
        return sum(_tensor_bytes(v) for v in value)
    return 0


def worker_cost(index: SplitIndex, arm: str, args: argparse.Namespace) -> dict[str, float]:
    """Microseconds and bytes per sample of what a worker runs for ``arm`` (in this process)."""
    pipeline = make_pipeline(index, arm, torch.device("cpu"), args, workers=0)
    dataset = pipeline._loader.dataset  # what each DataLoader worker holds
    pipeline.set_epoch(1, mosaic=True)
    order = torch.randperm(len(index), generator=torch.Generator().manual_seed(0)).tolist()
    batches = [order[i : i + args.batch] for i in range(0, len(order) - args.batch + 1, args.batch)]

    # The GPU arms' datasets hand a worker whole batches (``__getitems__``), the CPU arm's one sample a call.
    getitems = getattr(dataset, "__getitems__", None)
    if arm != "cpu" and getitems is None:
        sys.exit(f"{arm} arm: {type(dataset).__name__} has no __getitems__; this script predates the pipeline's dataset")

    def one_batch(indices: list[int]) -> object:
        if arm == "cpu" or getitems is None:
            return [dataset[i] for i in indices]
        return getitems(indices)

    # Batches are allocated in shared memory as inside a worker (collate asks get_worker_info);
    # the transfer to the main process is not timed here.
    with mock.patch.object(collate, "get_worker_info", lambda: True):
        one_batch(batches[0])  # warm: page in the memory map, first allocations
        start, payload, samples = time.perf_counter(), 0, 0
        for _ in range(args.epochs):
            for indices in batches:
                payload += _tensor_bytes(one_batch(indices))
                samples += len(indices)
        seconds = time.perf_counter() - start
    del pipeline
    return {"us_per_sample": 1e6 * seconds / samples, "kb_per_sample": payload / samples / 1024}


def run_arm(index: SplitIndex, *, arm: str, device: torch.device, args: argparse.Namespace) -> dict[str, float]:
    """Warm epoch, then timed epochs; returns images/s and ms per batch over the timed epochs."""
    pipeline = make_pipeline(index, arm, device, args, workers=args.workers)
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
            log(
                f"  {arm} arm, {label}: {seen} images in {elapsed:.2f} s "
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
    parser.add_argument("--arms", default="cpu,gpu,resident",
                        help="comma-separated: cpu, gpu, resident (gpu and resident need CUDA unless --worker-cost)")
    parser.add_argument("--cache", choices=("ram", "disk"), default="ram",
                        help="host image cache place of the cpu and gpu arms (never on the device)")
    parser.add_argument("--worker-cost", action="store_true",
                        help="time what a worker does per sample of each arm, in this process (no GPU needed)")
    parser.add_argument("--keep", action="store_true", help="keep the image cache file afterwards")
    args = parser.parse_args()

    has_cuda = torch.cuda.is_available()
    device = torch.device("cuda", torch.cuda.current_device()) if has_cuda else torch.device("cpu")
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if unknown := set(arms) - {"cpu", "gpu", "resident"}:
        sys.exit(f"--arms: unknown arm(s) {sorted(unknown)}; use cpu, gpu, resident")
    if not has_cuda and not args.worker_cost:
        for arm in ("gpu", "resident"):
            if arm in arms:
                log(f"no CUDA device: skipping the {arm} arm (--worker-cost measures it without one)")
                arms.remove(arm)
    with tempfile.TemporaryDirectory(prefix="libreyolo-bench-data-") as tmp:
        os.environ.setdefault("LIBREYOLO_CACHE_DIR", str(Path(tmp) / "cache"))
        start = time.perf_counter()
        index = build_synthetic_split(Path(tmp) / "images", args.images, args.imgsz)
        log(
            f"wrote {len(index)} synthetic JPEGs ({index.n_instances()} boxes) in "
            f"{time.perf_counter() - start:.1f} s"
        )
        results = {}
        for arm in arms:
            if args.worker_cost:
                log(f"{arm} arm: worker cost per sample, batch {args.batch}, {args.imgsz} px")
                results[arm] = worker_cost(index, arm, args)
            else:
                log(f"{arm} arm: batch {args.batch}, {args.workers} workers, {args.imgsz} px, on {device}")
                results[arm] = run_arm(index, arm=arm, device=device, args=args)

    gpu_name = torch.cuda.get_device_name(device) if has_cuda else "none"
    if args.worker_cost:
        print(f"bench_data --worker-cost: {args.images} images at {args.imgsz} px, batch {args.batch}, mosaic on, "
              f"{args.epochs} passes, one process, torch {torch.__version__}, {os.cpu_count()} CPUs")
        print(f"{'arm':<10}{'us/sample':>12}{'KiB/sample':>12}")
        for arm, r in results.items():
            print(f"{arm:<10}{r['us_per_sample']:>12.0f}{r['kb_per_sample']:>12.1f}")
        return
    print(
        f"bench_data: {args.images} images at {args.imgsz} px, batch {args.batch}, {args.workers} workers, "
        f"{args.epochs} timed epochs, torch {torch.__version__}, {os.cpu_count()} CPUs, GPU {gpu_name}"
    )
    print(f"{'arm':<10}{'images/s':>12}{'ms/batch':>12}")
    for arm, r in results.items():
        print(f"{arm:<10}{r['images_per_s']:>12.1f}{r['ms_per_batch']:>12.1f}")
    for arm in ("gpu", "resident"):
        if "cpu" in results and arm in results:
            print(f"ratio {arm}/cpu: {results[arm]['images_per_s'] / results['cpu']['images_per_s']:.2f}x")


if __name__ == "__main__":
    main()
