"""What a rectangular predict canvas would save on the network (issue 45): YOLOv9-t's fused network
alone, batch 1, on a square 640x640 canvas against Ultralytics' minimal-padding one for a 16:9
picture (640x384), graphed and eager, fp32 and fp16, NCHW and channels-last.

Predict letterboxes every picture to a square canvas; Ultralytics pads a 1280x720 photograph only
to 640x384. At batch 1 the graphed network is 2.8-3.1 ms of an 8-ms predict call on an H100
(``docs/benchmarks.md``), and a chain of small kernels may not shrink with the pixels: this probe
reads how much a rectangular canvas would give before predict grows one (per-shape graphs, each
family's fixed-size question, the exported runtimes' static shapes).

Graph: one ``torch.cuda.CUDAGraph`` per case, CUDA-event time of a replay (median of ``--reps``);
eager: host wall time of a synchronised call (median of ``--reps`` / 4). The case rows run one
after the other in one process.

    PYTHONPATH=... python tools/probe_net_shapes.py --out probe-net-shapes.md
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from report import emit_report, log

CANVASES = ((640, 640), (384, 640))


def replay_ms(graph: torch.cuda.CUDAGraph, reps: int) -> float:
    for _ in range(10):
        graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def one_case(net: torch.nn.Module, hw: tuple[int, int], dtype: torch.dtype, channels_last: bool,
             reps: int) -> tuple[float, float]:
    """(graph replay ms, eager call ms) of ``net`` on a ``1x3xHxW`` input."""
    layout = torch.channels_last if channels_last else torch.contiguous_format
    movable: Any = net  # Module.to takes memory_format at run time; its stubs do not say so
    net = movable.to(dtype=dtype, memory_format=layout)
    x = torch.rand((1, 3, *hw), device="cuda", dtype=dtype).contiguous(memory_format=layout)
    with torch.inference_mode():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the capture stream, as capture wants
            for _ in range(3):
                net(x)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            net(x)
        graphed = replay_ms(graph, reps)
        eager = []
        for _ in range(max(reps // 4, 5)):
            started = time.perf_counter()
            net(x)
            torch.cuda.synchronize()
            eager.append((time.perf_counter() - started) * 1e3)
    del graph
    return graphed, statistics.median(eager)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="t")
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("probe_net_shapes: needs a CUDA GPU (none visible here)", file=sys.stderr)
        return 2
    from libreyolo_models import LibreYOLO

    model = LibreYOLO(f"LibreYOLO9{args.size}.yaml")
    model.to("cuda")
    net = model.handle.fused_net().eval()
    lines = [f"## YOLOv9-{args.size} fused network alone, batch 1, square against rectangular canvas "
             f"({datetime.date.today()}, {torch.cuda.get_device_name()}, torch {torch.__version__})", "",
             "| dtype | layout | canvas | graph ms | eager ms | graph: rect / square |", "|---|---|---|---:|---:|---:|"]
    for dtype in (torch.float32, torch.float16):
        for channels_last in (False, True):
            square = 0.0
            for hw in CANVASES:
                graphed, eager = one_case(net, hw, dtype, channels_last, args.reps)
                square = square or graphed
                ratio = f"{graphed / square:.2f}" if hw != CANVASES[0] else "-"
                lines.append(f"| {str(dtype).removeprefix('torch.')} | {'channels-last' if channels_last else 'NCHW'} | "
                             f"{hw[1]}x{hw[0]} | {graphed:.3f} | {eager:.3f} | {ratio} |")
                log(lines[-1])
    emit_report(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
