#!/usr/bin/env python
"""How a folder's CPU decoding scales with threads and processes on this machine (no GPU work).

Predict's folder throughput on photographs stayed near 300 images/s whatever the decoding pool
(4 threads, 4, 8 or 12 processes: ``probe_folder.py``), so this reads the machine itself: its CPU
quota and affinity, one thread's cost per photograph for each step of ``read_image_for`` (PIL's
reduced-scale decode, the resize, the whole call), and ``decode_files``' images per second at
1-8 threads and 2-8 processes.

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

from predict_media import write_images
from report import add_row, emit_report


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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=200)
    p.add_argument("--imgsz", type=int, default=640)
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
    emit_report(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
