#!/usr/bin/env python
"""Inference benchmark: eager vs GraphRunner vs torch.compile(mode="reduce-overhead"), one run.

For each model, precision (fp32, fp16 autocast with cache_enabled=False) and batch size it
reports the median latency (CUDA events around each synchronized call, after warmup), the
speedup over eager, what the first call cost (capture or compile), and whether the output
is bit-identical to eager. Prints a markdown table to stdout (progress goes to stderr) and
can write it to a file.

    python tools/bench_infer_graphs.py --out bench-infer.md
    python tools/bench_infer_graphs.py --no-compile --batches 1 --dtypes fp16
    python tools/bench_infer_graphs.py --extra mypkg.bench:yolo9t   # adds a row family

``--extra module:factory`` names a callable returning ``(name, nn.Module, imgsz)``; the module
is moved to the GPU and put in eval mode here. Needs torch (and torchvision for the built-in
models). Random weights; BatchNorm statistics are set from one batch so fp16 stays finite.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
from factories import InferCase, load_factory
from report import emit_report, log
from torch import nn

from libreyolo_cudagraph import GraphRunner, bitwise_equal

BUILTIN = ("resnet18", "efficientnet_v2_s")


def builtin_model(name: str) -> InferCase:
    try:
        import torchvision
    except ImportError:
        sys.exit(f"model {name!r} needs torchvision; install it or use --extra")
    factories = {
        "resnet18": torchvision.models.resnet18,
        "efficientnet_v2_s": torchvision.models.efficientnet_v2_s,
    }
    if name not in factories:
        sys.exit(
            f"unknown model {name!r}; built in: {', '.join(BUILTIN)} (add others with --extra module:factory)"
        )
    return name, factories[name](weights=None), 224


def extra_model(spec: str) -> InferCase:
    name, model, imgsz = load_factory(spec, "(name, nn.Module, imgsz)")()
    if not isinstance(model, nn.Module):
        sys.exit(f"--extra {spec!r}: returned a {type(model).__name__} where the nn.Module belongs")
    return str(name), model, int(imgsz)


def calibrate_batchnorm(model: nn.Module, imgsz: int) -> None:
    """Random-init BN statistics let activations blow up in fp16; set them from one batch."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    saved = [m.momentum for m in norms]
    for m in norms:
        m.momentum = 1.0
    model.train()
    with torch.no_grad():
        model(torch.randn(8, 3, imgsz, imgsz, device="cuda"))
    for m, momentum in zip(norms, saved):
        m.momentum = momentum
    model.eval()


def median_ms(fn: Callable[[], Any], reps: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def first_call_ms(fn: Callable[[], Any]) -> tuple[float, Any]:
    torch.cuda.synchronize()
    started = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - started) * 1000.0, out


def first_leaf(out: Any) -> torch.Tensor:
    while not isinstance(out, torch.Tensor):
        out = out[0] if isinstance(out, (tuple, list)) else next(iter(out.values()))
    return out


def bench_config(
    model: nn.Module, compiled: Any, x: torch.Tensor, precision: str, args: argparse.Namespace
) -> dict:
    amp = (
        torch.autocast("cuda", dtype=torch.float16, cache_enabled=False)
        if precision == "fp16"
        else nullcontext()
    )
    row: dict[str, Any] = {}
    with torch.no_grad(), amp:
        reference = first_leaf(model(x)).clone()
        row["eager_ms"] = median_ms(lambda: model(x), args.reps, args.warmup)
        runner = GraphRunner(model, mode="on")
        row["graph_first_ms"], out = first_call_ms(lambda: runner(x))
        row["graph_bitwise"] = bitwise_equal(first_leaf(out), reference)
        graphs = runner.info().graphs
        if graphs:
            row["graph_ms"] = median_ms(lambda: runner(x), args.reps, args.warmup)
            row["capture_ms"] = graphs[0].capture_ms
        else:
            log(f"    not graphed: {dict(runner.info().fallbacks)}")
        runner.release()
        if compiled is not None:
            mark = getattr(torch.compiler, "cudagraph_mark_step_begin", lambda: None)

            def call_compiled() -> Any:
                mark()
                return compiled(x)

            row["compile_first_ms"], out = first_call_ms(call_compiled)
            row["compile_bitwise"] = bitwise_equal(first_leaf(out).clone(), reference)
            row["compile_ms"] = median_ms(call_compiled, args.reps, args.warmup)
    return row


def fmt_row(name: str, precision: str, batch: int, r: dict) -> str:
    cells = [name, precision, str(batch), f"{r['eager_ms']:.2f}"]
    if "graph_ms" in r:
        cells += [
            f"{r['graph_ms']:.2f}",
            f"{r['eager_ms'] / r['graph_ms']:.2f}x",
            f"{r['capture_ms']:.0f}",
            "yes" if r["graph_bitwise"] else "NO",
        ]
    else:
        cells += ["not graphed", "-", "-", "-"]
    if "compile_ms" in r:
        cells += [
            f"{r['compile_ms']:.2f}",
            f"{r['eager_ms'] / r['compile_ms']:.2f}x",
            f"{r['compile_first_ms'] / 1000:.1f}",
            "yes" if r["compile_bitwise"] else "no",
        ]
    else:
        cells += ["-", "-", "-", "-"]
    return "| " + " | ".join(cells) + " |"


def header(args: argparse.Namespace) -> list[str]:
    props = torch.cuda.get_device_properties(0)
    return [
        f"Inference benchmark, {datetime.date.today().isoformat()}: torch {torch.__version__}, "
        f"CUDA {torch.version.cuda}, {props.name}; median of {args.reps} synchronized calls after {args.warmup} "
        f"warmup; cudnn.benchmark={torch.backends.cudnn.benchmark}; random weights.",
        "",
        "| model | precision | batch | eager ms | graph ms | graph speedup | graph capture ms | graph bitwise "
        "| compile ms | compile speedup | compile first call s | compile bitwise |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--models", default=",".join(BUILTIN), help="comma-separated built-in models ('' for none)"
    )
    p.add_argument(
        "--extra", action="append", default=[], help="module:factory returning (name, nn.Module, imgsz)"
    )
    p.add_argument("--batches", default="1,8,32")
    p.add_argument("--dtypes", default="fp32,fp16", help="fp32 and/or fp16 (autocast, cache_enabled=False)")
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="include torch.compile(mode='reduce-overhead') (tens of seconds per model and precision)",
    )
    p.add_argument("--cudnn-benchmark", action="store_true", help="let cuDNN autotune (default: heuristics)")
    p.add_argument("--out", type=Path, help="also write the markdown table here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("this benchmark needs a CUDA GPU")
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    models = [builtin_model(m) for m in args.models.split(",") if m] + [extra_model(e) for e in args.extra]
    batches = [int(b) for b in args.batches.split(",")]
    precisions = [d for d in args.dtypes.split(",") if d]
    lines = header(args)
    started = time.perf_counter()
    for name, model, imgsz in models:
        torch.manual_seed(0)
        model = model.cuda()
        calibrate_batchnorm(model, imgsz)
        # dynamic=False: each batch size gets its own static compile, compile's best case.
        compiled = torch.compile(model, mode="reduce-overhead", dynamic=False) if args.compile else None
        for precision in precisions:
            for batch in batches:
                log(f"[{time.perf_counter() - started:6.1f} s] {name} {precision} batch {batch} ...")
                x = torch.rand(batch, 3, imgsz, imgsz, device="cuda")
                row = bench_config(model, compiled, x, precision, args)
                lines.append(fmt_row(name, precision, batch, row))
                log("    " + lines[-1])
        del compiled, model
        torch.cuda.empty_cache()
    lines += ["", f"Total wall time {time.perf_counter() - started:.0f} s."]
    emit_report(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
