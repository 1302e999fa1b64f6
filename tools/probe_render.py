"""What rendering one GPU-path training batch costs the GPU, stage by stage (issue 21).

The batch rendering runs on a side stream beside the training step; in a graphed step, which is
bound by the GPU rather than the host, its GPU time competes with the step's own. This probe
builds a mosaic batch like the trainer's (``--batch`` samples of four resident 640 px images,
default augmentation draws) and reports:

- each stage's GPU time (CUDA events, median of ``--reps``): the resident gather, tile placement
  on the 2S canvas, the affine warp, HSV, flip, and the division by 255;
- the whole rendering eager and replayed from its graph (``tasks.detect.render_graph``): host issue time
  and GPU time, and whether the bytes are the same;
- the operations of one eager rendering by GPU time (torch.profiler);
- the forms a stage had before (and has under deterministic algorithms), each checked for the
  shipped form's bytes.

    PYTHONPATH=... python tools/probe_render.py --batch 32 --out probe-render.md
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from bench_predict import median_ms
from report import emit_report, log
from torch import Tensor

from libreyolo_models.data import augment_ops
from libreyolo_models.data.augment_draws import AugmentConfig, draw_sample
from libreyolo_models.data.augment_ops import grid_theta, mosaic_offsets
from libreyolo_models.data.collate import TileBatch, TileGroup
from libreyolo_models.data.letterbox import FILL, place_tiles, place_tiles_gathered
from libreyolo_models.tasks.detect.render_graph import RenderGraphs, render_eagerly


def mosaic_batch(batch: int, imgsz: int, n_images: int, device: torch.device) -> tuple[TileBatch, Tensor]:
    """A batch of mosaic samples with default draws over ``n_images`` random resident images."""
    gen = torch.Generator().manual_seed(0)
    resident = torch.randint(0, 256, (n_images, imgsz, imgsz, 3), dtype=torch.uint8, generator=gen).to(device)
    rng = np.random.default_rng(0)
    sizes = np.stack([np.full(n_images, imgsz), rng.integers(imgsz // 2, imgsz + 1, n_images)], 1)
    rng.shuffle(sizes, axis=1)  # long side at imgsz, as the cache stores images
    draws = [draw_sample(AugmentConfig(), index=i, n_images=n_images, imgsz=imgsz, seed=0, rank=0, epoch=0,
                         mosaic=True) for i in range(batch)]
    rows = np.array([d.tile_indices for d in draws], dtype=np.int64).reshape(batch, 4)
    hw = torch.from_numpy(sizes[rows].astype(np.int64))
    offsets = mosaic_offsets(torch.tensor([d.centre for d in draws], dtype=torch.int64), hw)
    matrix = torch.from_numpy(np.stack([d.matrix for d in draws]))
    flip = torch.tensor([d.flip for d in draws], dtype=torch.bool)
    group = TileGroup(positions=torch.arange(batch), cache_rows=torch.from_numpy(rows), tiles=None, offsets=offsets,
                      hw=hw, canvas=2 * imgsz, theta=grid_theta(matrix, 2 * imgsz, imgsz),
                      hsv=torch.tensor([d.hsv for d in draws], dtype=torch.float32), flip=flip,
                      has_hsv=True, has_flip=bool(flip.any()))
    tiles = TileBatch(groups=[group], targets=torch.zeros(0, 6), paths=[""] * batch, ori_sizes=[(0, 0)] * batch)
    return tiles.to(device), resident


def gpu_ms(fn: Callable[[], Any], reps: int) -> float:
    """Median GPU milliseconds of ``fn`` (CUDA events around each call, one warm-up call)."""
    return median_ms(fn, reps, warmup=1)


def host_ms(fn: Callable[[], Any], reps: int) -> float:
    """Median host milliseconds to issue ``fn`` (the GPU drained before each call)."""
    fn()
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    torch.cuda.synchronize()
    return statistics.median(times)


def warp_two_passes(canvas: Tensor, theta: Tensor, out_size: int, fill: float = FILL) -> Tensor:
    """``warp_canvas`` as it was before: the uint8 -> float conversion and the shift by ``-fill``
    as two passes over the float canvas."""
    images = canvas.permute(0, 3, 1, 2).float().sub_(fill)
    grid = augment_ops.sampling_grid(theta.to(images.device), out_size)
    return torch.nn.functional.grid_sample(images, grid, mode="bilinear", padding_mode="zeros",
                                           align_corners=False).add_(fill)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--imgsz", type=int, default=640)
    p.add_argument("--images", type=int, default=256, help="resident images the tiles come from")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("probe_render needs a CUDA GPU")
    device = torch.device("cuda")
    batch, resident = mosaic_batch(args.batch, args.imgsz, args.images, device)
    group, size, reps = batch.gather(resident).groups[0], args.imgsz, args.reps
    tiles = group.tiles
    assert tiles is not None, "gather() fills every group's tiles"
    canvas = place_tiles(tiles, group.offsets, group.hw, group.canvas)
    warped = augment_ops.warp_canvas(canvas, group.theta, size)
    coloured = augment_ops.jitter_hsv(warped, group.hsv)
    flipped = augment_ops.flip_images(coloured, group.flip)
    stages: list[tuple[str, Callable[[], Any]]] = [
        ("gather the resident tiles", lambda: batch.gather(resident)),
        ("place the tiles on the 2S canvas", lambda: place_tiles(tiles, group.offsets, group.hw, group.canvas)),
        ("affine warp (float canvas, grid_sample)", lambda: augment_ops.warp_canvas(canvas, group.theta, size)),
        ("HSV", lambda: augment_ops.jitter_hsv(warped, group.hsv)),
        ("flip", lambda: augment_ops.flip_images(coloured, group.flip)),
        ("divide by 255", lambda: flipped.div(255)),
    ]
    with torch.no_grad():
        lines = [f"# Rendering one mosaic batch ({datetime.date.today()}, torch {torch.__version__}, "
                 f"{torch.cuda.get_device_name()}), batch {args.batch}, {size} px", "",
                 "| stage | GPU ms |", "|---|---:|"]
        total = 0.0
        for name, fn in stages:
            ms = gpu_ms(fn, reps)
            total += ms
            lines.append(f"| {name} | {ms:.3f} |")
            log(f"{name}: {ms:.3f} ms")
        lines += [f"| sum of stages | {total:.3f} |", ""]

        graphs = RenderGraphs(size, resident)
        eager_out = render_eagerly(batch, size, resident)
        graphs(batch)  # seen once: eager; the second call captures
        same = torch.equal(graphs(batch).clone(), eager_out)
        lines += ["| whole rendering | host issue ms | GPU ms |", "|---|---:|---:|",
                  f"| eager | {host_ms(lambda: render_eagerly(batch, size, resident), reps):.3f} | "
                  f"{gpu_ms(lambda: render_eagerly(batch, size, resident), reps):.3f} |",
                  f"| graph replay | {host_ms(lambda: graphs(batch), reps):.3f} | {gpu_ms(lambda: graphs(batch), reps):.3f} |",
                  "", f"graph replay gives the eager bytes: {'yes' if same else 'NO'}; "
                  f"pool {sum(g.pool_bytes for g in graphs.info().graphs) / 2**30:.2f} GiB", ""]

        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            render_eagerly(batch, size, resident)
            torch.cuda.synchronize()
        lines += ["Operations of one eager rendering by GPU time:", "", "```",
                  prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=18, max_name_column_width=40),
                  "```", ""]

        gathered = place_tiles_gathered(tiles, group.offsets, group.hw, group.canvas)
        lines += ["| other form (as before, or deterministic mode) | GPU ms | shipped form GPU ms | same bytes |",
                  "|---|---:|---:|---|",
                  f"| placement by gathers per tile slot | "
                  f"{gpu_ms(lambda: place_tiles_gathered(tiles, group.offsets, group.hw, group.canvas), reps):.3f} | "
                  f"{gpu_ms(lambda: place_tiles(tiles, group.offsets, group.hw, group.canvas), reps):.3f} | "
                  f"{'yes' if torch.equal(gathered, canvas) else 'NO'} |",
                  f"| warp: uint8 -> float, then -fill | "
                  f"{gpu_ms(lambda: warp_two_passes(canvas, group.theta, size), reps):.3f} | "
                  f"{gpu_ms(lambda: augment_ops.warp_canvas(canvas, group.theta, size), reps):.3f} | "
                  f"{'yes' if torch.equal(warp_two_passes(canvas, group.theta, size), warped) else 'NO'} |", ""]
    emit_report(lines, args.out)


if __name__ == "__main__":
    main()
