#!/usr/bin/env python
"""What decoding one JPEG costs, per decoder, and how far each decoder's pixels are from ours.

Decoders: ours (``predict.sources.read_image``: PIL, EXIF orientation applied), PIL alone,
``torchvision.io.decode_jpeg`` on the CPU, OpenCV's ``imdecode`` (when installed) and, with a
GPU, ``torchvision.io.decode_jpeg(device="cuda")`` (nvJPEG; file bytes read on the host). For each:
median ms of ``--reps`` calls (GPU: CUDA-synchronised), and the largest and mean difference in grey
levels from ours, both of the decoded pixels and of the letterboxed network input predict builds
(``predict.letterbox.letterbox_batch`` at ``--imgsz``). The issue's rule: a decoder may replace
ours only if predict and validation then still see the same pixels within one grey level.

torchvision 0.29 deprecates its image decoders (``torchvision.io.decode_jpeg``, nvJPEG included)
in favour of TorchCodec; they are measured here to size what a GPU decoder would save, not to
be adopted as they are (their deprecation warnings are silenced in this script).

    python tools/probe_decode.py                       # the bundled sample and a 1280x720 JPEG
    python tools/probe_decode.py --images a.jpg b.jpg --out decode.md
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from report import emit_report, log


def _median_ms(fn: Callable[[], Any], reps: int, cuda: bool) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def decoders(path: Path) -> dict[str, tuple[Callable[[], Any], bool]]:
    """name -> (a call returning HWC uint8 as a tensor or array, whether it runs on the GPU)."""
    import torchvision.io as tvio

    from libreyolo_models.predict.sources import read_image

    data = path.read_bytes()
    raw = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    out: dict[str, tuple[Callable[[], Any], bool]] = {
        "ours (PIL, read_image)": (lambda: read_image(path), False),
        "PIL open+convert": (lambda: np.asarray(Image.open(path).convert("RGB")), False),
        "torchvision CPU": (lambda: tvio.decode_jpeg(raw, mode=tvio.ImageReadMode.RGB).permute(1, 2, 0), False),
    }
    try:
        import cv2

        buf = np.frombuffer(data, np.uint8)
        out["OpenCV imdecode (+BGR->RGB)"] = (lambda: cv2.cvtColor(cv2.imdecode(buf, cv2.IMREAD_COLOR),
                                                                  cv2.COLOR_BGR2RGB), False)
    except ImportError:
        pass
    if torch.cuda.is_available():
        out["nvJPEG (torchvision, cuda)"] = (
            lambda: tvio.decode_jpeg(raw, mode=tvio.ImageReadMode.RGB, device="cuda").permute(1, 2, 0), True)
    return out


def probe(path: Path, imgsz: int, reps: int) -> list[str]:
    from libreyolo_models.predict.letterbox import letterbox_batch
    from libreyolo_models.predict.sources import read_image

    ref = read_image(path)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    ref_in, _ = letterbox_batch([torch.from_numpy(np.ascontiguousarray(ref)).to(device)], imgsz)
    rows = [f"### {path.name} ({ref.shape[1]}x{ref.shape[0]})", "",
            "| decoder | ms | pixels max / mean diff | letterboxed max / mean diff (grey levels) |",
            "|---|---:|---:|---:|"]
    for name, (fn, cuda) in decoders(path).items():
        try:
            ms = _median_ms(fn, reps, cuda)
            got = fn()
        except Exception as err:  # noqa: BLE001 - a decoder that cannot read the file is a row, not a crash
            rows.append(f"| {name} | failed: {type(err).__name__}: {str(err)[:80]} | | |")
            continue
        pixels = torch.as_tensor(np.ascontiguousarray(got) if isinstance(got, np.ndarray) else got.contiguous())
        diff = (pixels.cpu().int() - torch.from_numpy(np.ascontiguousarray(ref)).int()).abs()
        x, _ = letterbox_batch([pixels.to(device)], imgsz)
        grey = ((x - ref_in).abs() * 255).round()
        rows.append(f"| {name} | {ms:.2f} | {int(diff.max())} / {float(diff.float().mean()):.3f} | "
                    f"{int(grey.max())} / {float(grey.mean()):.3f} |")
    return [*rows, ""]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=Path, nargs="*", default=None)
    p.add_argument("--imgsz", type=int, default=640)
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore", message="The image decoding and encoding capabilities of TorchVision")
    images = args.images
    if not images:
        from bench_predict import scene

        from libreyolo_models import SAMPLE_IMAGE

        wide = Path("/tmp/probe-decode-720p.jpg")
        Image.fromarray(scene(999)).save(wide, quality=90)
        images = [Path(SAMPLE_IMAGE), wide]
    where = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU only"
    lines = [f"## Decoding one JPEG ({where}, torch {torch.__version__}, median of {args.reps})", ""]
    for path in images:
        log(f"probing {path}")
        lines += probe(path, args.imgsz, args.reps)
    emit_report(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
