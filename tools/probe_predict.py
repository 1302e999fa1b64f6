#!/usr/bin/env python
"""Where a one-image ``model(path)`` call's time goes (GPU): every step of the call timed apart.

``bench_predict.py`` reports phases as CUDA-event intervals, which hide host work that overlaps
the GPU and say nothing of what runs before the first event (option parsing, the predictor's
set-up, opening the source). This probe replays the call's steps one by one, each followed by a
device synchronisation, and takes the host wall time of each (medians over ``--reps``):

    config, open source, predictor set-up, read+decode, to tensor+pin, letterbox (upload,
    resize, layout), network, post-process (threshold, NMS), to host, results

next to the median of the whole call, for the fused eager and the graphed arm, with JPEGs decoded
on the CPU (``gpu_decode=False``; the GPU decoder's calls are ``bench_predict.py``'s). Then the
decoders on the same file (PIL as predict uses it, torchvision's libjpeg-turbo on the CPU and
nvjpeg on the GPU), pinning and upload costs, and a ``torch.profiler`` table of the graphed call's
host-side operators (self CPU time).

    python tools/probe_predict.py --out probe-predict.md
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import torch
from bench_predict import fresh_model
from PIL import Image
from predict_media import scene
from report import emit_report, log

if TYPE_CHECKING:
    from libreyolo_models import LibreYOLO
    from libreyolo_models.predict.predictor import FrameBatch

T = TypeVar("T")


def timed(fn: Callable[[], T], reps: int, *, sync: bool = True) -> tuple[float, T]:
    """Median host ms of ``fn`` over ``reps`` calls after one untimed call (each call followed by a
    device synchronisation), and its last value."""
    times = []
    out = fn()
    for _ in range(reps):
        started = time.perf_counter()
        out = fn()
        if sync:
            torch.cuda.synchronize()
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times), out


def steps(facade: LibreYOLO, path: Path, options: dict[str, Any], reps: int) -> list[tuple[str, float]]:
    """The call's steps timed one by one (each on the previous step's output)."""
    from libreyolo_models.config import load_config
    from libreyolo_models.devices import default_device
    from libreyolo_models.predict.predictor import Predictor, _batches
    from libreyolo_models.predict.streams import open_source
    from libreyolo_models.settings import PredictConfig

    model = facade.handle  # what predict runs on
    rows: list[tuple[str, float]] = []
    ms, cfg = timed(lambda: load_config(PredictConfig, options, "predict()"), reps)
    rows.append(("config", ms))
    # device and image size, resolved as run_prediction does (the image size is also the reduced decode's)
    device = default_device(cfg.device, model.device, model.runs_only_on)
    shrink = model.resolve_imgsz(cfg.imgsz)
    ms, plan = timed(lambda: open_source(str(path), vid_stride=1, shrink_to=shrink), reps)
    rows.append(("open source", ms))
    ms, predictor = timed(lambda: Predictor(model, cfg, device=device, imgsz=shrink), reps)
    rows.append(("predictor set-up", ms))

    def decode() -> FrameBatch:
        return next(_batches(open_source(str(path), vid_stride=1, shrink_to=shrink).frames, 1))

    ms, batch = timed(decode, reps)
    rows.append(("open + read + decode", ms))
    ms, _ = timed(lambda: [p.pin_memory() for p in batch.pixels], reps)
    rows.append(("pin", ms))
    pinned = [p.pin_memory() for p in batch.pixels]
    task = predictor.task
    shapes = [f.orig_shape for f in batch.frames]
    ms, prepared = timed(lambda: task.prepare_batch(pinned, shrink, model.dtype, device, shapes), reps)
    rows.append(("letterbox (upload, resize, layout)", ms))
    x, infos = prepared
    with torch.inference_mode():
        ms, out = timed(lambda: predictor.forward(x), reps)
    rows.append(("network", ms))
    ms, post = timed(lambda: model.family.postprocess(out, predictor.options), reps)
    rows.append(("post-process (threshold, NMS)", ms))
    ms, host = timed(lambda: task.predictions_to_host(post), reps)
    rows.append(("to host", ms))
    frame = batch.frames[0]
    ms, _ = timed(lambda: task.make_results(frame.image, frame.name, predictor.names, host[0], infos[0], {}), reps)
    rows.append(("results", ms))
    rows.append(("sum of the steps", sum(r[1] for r in rows)))
    ms, _ = timed(lambda: facade(str(path), **options), reps, sync=False)
    rows.append(("whole call model(path)", ms))
    return rows


def decoders(path: Path, reps: int) -> list[tuple[str, float]]:
    """The same file through each decoder there is, and the pixel moves around it."""
    import torchvision.io as tvio

    from libreyolo_models.data.decode import read_image_file

    rows = []
    from libreyolo_models.data.image_files import read_image_for

    rows.append(("read_image_file (PIL, EXIF, mode)", timed(lambda: read_image_file(path), reps, sync=False)[0]))
    rows.append(("read_image_for(640): reduced DCT scale when large", timed(lambda: read_image_for(path, 640), reps,
                                                                             sync=False)[0]))
    rows.append(("PIL open+load only", timed(lambda: Image.open(path).load(), reps, sync=False)[0]))
    rows.append(("torchvision decode_jpeg, CPU", timed(lambda: tvio.decode_jpeg(tvio.read_file(str(path))), reps,
                                                       sync=False)[0]))
    data = tvio.read_file(str(path))
    try:
        tvio.decode_jpeg(data, device="cuda")
        rows.append(("torchvision decode_jpeg, nvjpeg (GPU)", timed(lambda: tvio.decode_jpeg(
            tvio.read_file(str(path)), device="cuda"), reps)[0]))
    except Exception as err:  # noqa: BLE001 - reported, not fatal
        rows.append((f"nvjpeg failed: {type(err).__name__}: {str(err)[:80]}", float("nan")))
    pixels = torch.from_numpy(np.ascontiguousarray(read_image_file(path)[0]))
    rows.append(("pin_memory of the pixels", timed(lambda: pixels.pin_memory(), reps)[0]))
    pinned = pixels.pin_memory()
    rows.append(("upload, pageable", timed(lambda: pixels.to("cuda"), reps)[0]))
    rows.append(("upload, pinned", timed(lambda: pinned.to("cuda", non_blocking=True), reps)[0]))
    return rows


def profile(model: LibreYOLO, path: Path, options: dict[str, Any], calls: int) -> list[str]:
    """Host operators of ``calls`` whole calls, by self CPU time."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            model(str(path), **options)
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=60)
    return ["```", *table.splitlines(), "```"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="t")
    p.add_argument("--imgsz", type=int, default=640)
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--image", type=Path, default=None, help="default: the bundled sample")
    p.add_argument("--wide", action="store_true", help="also a 1280x720 JPEG")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("probe_predict.py needs a CUDA GPU")
    from libreyolo_models import SAMPLE_IMAGE

    images = [args.image or SAMPLE_IMAGE]
    if args.wide:
        wide = Path("/tmp/probe-predict-720p.jpg")
        Image.fromarray(scene(999)).save(wide, quality=90)
        images.append(wide)
    lines = [f"# predict probe: YOLOv9-{args.size}, imgsz {args.imgsz}, batch 1, median of {args.reps}",
             "", f"torch {torch.__version__}, {torch.cuda.get_device_name()}", ""]
    for image in images:
        size = Image.open(image).size
        for arm, extra in (("eager (fused)", {}), ("graph (fused)", {"cuda_graph": True})):
            log(f"{image.name} {arm}")
            model = fresh_model(args.size, args.imgsz)
            # the CPU decoder's call, whose steps the probe replays (nvJPEG: bench_predict.py's arms)
            options = {"imgsz": args.imgsz, "verbose": False, "device": 0, "gpu_decode": False, **extra}
            for _ in range(5):
                model(str(image), **options)
            rows = steps(model, image, options, args.reps)
            lines += [f"## {image.name} ({size[0]}x{size[1]}), {arm}", "", "| step | ms |", "|---|---:|",
                      *[f"| {name} | {ms:.3f} |" for name, ms in rows], ""]
            if extra and image == images[0]:
                lines += ["Host operators of 20 graphed calls:", "", *profile(model, image, options, 20), ""]
        lines += [f"## decoders, {image.name}", "", "| what | ms |", "|---|---:|",
                  *[f"| {name} | {ms:.3f} |" for name, ms in decoders(image, args.reps)], ""]
    emit_report(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
