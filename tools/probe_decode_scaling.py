#!/usr/bin/env python
"""How a folder's CPU decoding scales with threads and processes on this machine (no GPU work).

Predict's folder throughput on photographs stayed near 300 images/s whatever the decoding pool
(4 threads, 4, 8 or 12 processes: ``probe_folder.py``), so this reads the machine itself: its CPU
quota and affinity, one thread's cost per photograph for each step of ``read_image_for`` (PIL's
reduced-scale decode, the resize, the whole call), and ``decode_files``' images per second at
1-8 threads and 2-8 processes; then predict on CUDA's read (the reduced decode left at its DCT
size, copied into a reused batch buffer as staging does) with PIL's memory handed over as it
holds it (``data.pil_memory``) against packed by ``np.asarray``, the two taking turns.

    python tools/probe_decode_scaling.py --images 200 --out decode-scaling.md
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from predict_media import write_images
from report import add_row, emit_report

if TYPE_CHECKING:
    from libreyolo_models.data.decode import ImageDecodeError


def cpu_quota() -> str:
    for path in ("/sys/fs/cgroup/cpu.max", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"):
        try:
            return f"{path}: {Path(path).read_text().strip()}"
        except OSError:
            continue
    return "no cgroup CPU quota file"


def per_image_ms(fn: Callable[[Path], object], paths: list[Path]) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for path in paths:
            fn(path)
        best = min(best, (time.perf_counter() - started) * 1e3 / len(paths))
    return best


def handed_over_or_packed(paths: list[Path | ImageDecodeError], imgsz: int, threads: int, rounds: int) -> dict[bool, float]:
    """Median images/s of ``decode_files(resize_on_host=False)`` with each frame copied into a
    reused buffer, with the reduced decodes handed over as PIL holds them and packed (the two
    arms taking turns)."""
    import statistics

    import torch

    from libreyolo_models.data import decode
    from libreyolo_models.predict.staging import host_tensors
    from libreyolo_models.predict.streams import decode_files

    handed_over = decode.rgbx_view
    rates: dict[bool, list[float]] = {True: [], False: []}
    buffers: dict[tuple[int, ...], torch.Tensor] = {}
    try:
        for _ in range(rounds):
            for arm in (True, False):
                decode.rgbx_view = handed_over if arm else (lambda image: None)
                started = time.perf_counter()
                for frame in decode_files(paths, workers=threads, shrink_to=imgsz, resize_on_host=False):
                    pixels = host_tensors([frame.image])[0]
                    buffers.setdefault(tuple(pixels.shape), torch.empty_like(pixels)).copy_(pixels)
                rates[arm].append(len(paths) / (time.perf_counter() - started))
    finally:
        decode.rgbx_view = handed_over
    return {arm: statistics.median(v) for arm, v in rates.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=200)
    p.add_argument("--imgsz", type=int, default=640)
    p.add_argument("--rounds", type=int, default=4, help="turns of the handed-over / packed comparison")
    p.add_argument("--threads", default="2,8", help="decoding threads of that comparison")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    from PIL import Image

    from libreyolo_models.data.image_files import read_image, read_image_for
    from libreyolo_models.predict import decode_procs
    from libreyolo_models.predict.streams import decode_files

    paths = write_images(Path(tempfile.mkdtemp()) / "photos", args.images, "photos")
    sample = paths[:40]

    def draft(path: Path) -> Image.Image:
        with Image.open(io.BytesIO(path.read_bytes())) as im:
            im.draft("RGB", (im.size[0] // 2, im.size[1] // 2))
            im.load()
            return im

    def draft_resize(path: Path) -> Image.Image:
        im = draft(path)
        scale = args.imgsz / max(im.size)
        return im.resize((round(im.size[0] * scale), round(im.size[1] * scale)), Image.Resampling.BILINEAR) \
            if scale < 1 else im

    lines = [f"# CPU decoding on this machine ({os.cpu_count()} CPUs, affinity {len(os.sched_getaffinity(0))}; "
             f"{cpu_quota()})", "",
             f"One thread, ms per photograph (best of 3 over {len(sample)}; 2/5 720p, 3/5 1080p or portrait):", "",
             "| step | ms |", "|---|---:|"]
    for name, fn in (("PIL reduced-scale decode (1/2)", draft), ("... and resize to the letterbox", draft_resize),
                     (f"read_image_for({args.imgsz}) (predict's read)", lambda q: read_image_for(q, args.imgsz)),
                     ("read_image (full size)", read_image)):
        add_row(lines, f"| {name} | {per_image_ms(fn, sample):.2f} |")
    lines += ["", "`decode_files` over the folder (images/s):", "", "| pool | images/s |", "|---|---:|"]
    decode_procs.MIN_FILES = 1
    for kind, count in [("threads", 1), ("threads", 2), ("threads", 4), ("threads", 8),
                        ("processes", 2), ("processes", 4), ("processes", 8)]:
        started = time.perf_counter()
        n = sum(1 for _ in decode_files(list(paths), shrink_to=args.imgsz,
                                        processes=count if kind == "processes" else 0,
                                        workers=count if kind == "threads" else None))
        add_row(lines, f"| {count} {kind} | {n / (time.perf_counter() - started):.0f} |")
    lines += ["", "Predict on CUDA's read (`resize_on_host=False`) into a reused buffer, images/s, "
              f"{args.rounds} turns each (PIL's memory handed over: Pillow {Image.__version__}):", "",
              "| threads | handed over | packed (`np.asarray`) | ratio |", "|---:|---:|---:|---:|"]
    for threads in (int(t) for t in args.threads.split(",")):
        rates = handed_over_or_packed(list(paths), args.imgsz, threads, args.rounds)
        add_row(lines, f"| {threads} | {rates[True]:.0f} | {rates[False]:.0f} | {rates[True] / rates[False]:.2f}x |")
    emit_report(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
