#!/usr/bin/env python
"""What decoding one JPEG costs, per decoder, and how far each decoder's pixels are from ours.

Decoders: ours (``data.image_files.read_image``: PIL, EXIF orientation applied; and
``read_image_for``, the reduced decode predict runs for a letterbox), PIL alone,
``torchvision.io.decode_jpeg`` on the CPU, OpenCV's ``imdecode`` (when installed), TorchCodec's
``decode_jpeg`` (when installed) and, with a GPU, both libraries' nvJPEG decoders (file bytes read
on the host; TorchCodec's also per image of a batch of 32 decoded in one call). For each:
median ms of ``--reps`` calls (GPU: CUDA-synchronised), and the largest and mean difference in grey
levels from ours, both of the decoded pixels and of the letterboxed network input predict builds
(``data.letterbox_images.letterbox_batch`` at ``--imgsz``). The issue's rule: a decoder may replace
ours only if predict and validation then still see the same pixels within one grey level.

torchvision 0.29 deprecates its image decoders (``torchvision.io.decode_jpeg``, nvJPEG included)
in favour of TorchCodec, whose nvJPEG decoder predict uses on CUDA (``predict.gpu_jpeg``, the
``nvjpeg`` extra); torchvision's are measured beside it (their deprecation warnings silenced).

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


def _hwc(decoded: torch.Tensor | list[torch.Tensor]) -> torch.Tensor:
    """One decoded ``[3, H, W]`` image as ``[H, W, 3]`` (torchvision's and TorchCodec's ``decode_jpeg``
    return a list only for a list)."""
    assert isinstance(decoded, torch.Tensor), "one encoded image in, one tensor out"
    return decoded.permute(1, 2, 0)


def decoders(path: Path, imgsz: int) -> dict[str, tuple[Any, ...]]:
    """name -> (a call returning HWC uint8 as a tensor or array, whether it runs on the GPU[, images
    per call])."""
    import torchvision.io as tvio

    from libreyolo_models.data.image_files import read_image, read_image_for

    data = path.read_bytes()
    raw = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    out: dict[str, tuple[Any, ...]] = {
        "ours (PIL, read_image)": (lambda: read_image(path), False),
        "PIL open+convert": (lambda: np.asarray(Image.open(path).convert("RGB")), False),
        "torchvision CPU": (lambda: _hwc(tvio.decode_jpeg(raw, mode=tvio.ImageReadMode.RGB)), False),
    }
    try:
        import cv2

        buf = np.frombuffer(data, np.uint8)

        def opencv_rgb() -> np.ndarray:
            decoded = cv2.imdecode(buf, cv2.IMREAD_COLOR)
            if decoded is None:
                raise ValueError("OpenCV could not decode the probe image")
            return np.asarray(cv2.cvtColor(decoded, cv2.COLOR_BGR2RGB))

        out["OpenCV imdecode (+BGR->RGB)"] = (opencv_rgb, False)
    except ImportError:
        pass
    out["ours for the letterbox (read_image_for, reduced)"] = (lambda: read_image_for(path, imgsz).pixels, False)
    if torch.cuda.is_available():
        out["nvJPEG (torchvision, cuda)"] = (
            lambda: _hwc(tvio.decode_jpeg(raw, mode=tvio.ImageReadMode.RGB, device="cuda")), True)
    try:
        from torchcodec.decoders import decode_jpeg as tc_jpeg
    except Exception as err:  # noqa: BLE001 - missing, or built for another torch: reported, not fatal
        log(f"TorchCodec not usable: {type(err).__name__}: {err}")
        return out
    out["TorchCodec CPU"] = (lambda: _hwc(tc_jpeg(raw)), False)
    if torch.cuda.is_available():
        out["nvJPEG (TorchCodec, cuda)"] = (lambda: _hwc(tc_jpeg(raw, device="cuda")), True)
        batch = [raw] * 32
        out["nvJPEG (TorchCodec, cuda), per image of 32 in one call"] = (
            lambda: tc_jpeg(batch, device="cuda")[0].permute(1, 2, 0), True, 32)
    return out


def probe(path: Path, imgsz: int, reps: int) -> list[str]:
    from libreyolo_models.data.image_files import read_image
    from libreyolo_models.data.letterbox_images import letterbox_batch

    ref = read_image(path)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    ref_in, _ = letterbox_batch([torch.from_numpy(np.ascontiguousarray(ref)).to(device)], imgsz)
    rows = [f"### {path.name} ({ref.shape[1]}x{ref.shape[0]})", "",
            "| decoder | ms | pixels max / mean diff | letterboxed max / mean diff (grey levels) |",
            "|---|---:|---:|---:|"]
    for name, (fn, cuda, *per_call) in decoders(path, imgsz).items():
        try:
            ms = _median_ms(fn, reps, cuda) / (per_call[0] if per_call else 1)
            got = fn()
        except Exception as err:  # noqa: BLE001 - a decoder that cannot read the file is a row, not a crash
            rows.append(f"| {name} | failed: {type(err).__name__}: {str(err)[:80]} | | |")
            continue
        pixels = torch.as_tensor(np.ascontiguousarray(got) if isinstance(got, np.ndarray) else got.contiguous())
        if pixels.shape == ref.shape:
            diff = (pixels.cpu().int() - torch.from_numpy(np.ascontiguousarray(ref)).int()).abs()
            pixel_cell = f"{int(diff.max())} / {float(diff.float().mean()):.3f}"
        else:  # a reduced decode: only its letterboxed input compares
            pixel_cell = f"({pixels.shape[1]}x{pixels.shape[0]})"
        x, _ = letterbox_batch([pixels.to(device)], imgsz)
        grey = ((x - ref_in).abs() * 255).round()
        rows.append(f"| {name} | {ms:.2f} | {pixel_cell} | {int(grey.max())} / {float(grey.mean()):.3f} |")
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
        from predict_media import scene

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
