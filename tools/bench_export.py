#!/usr/bin/env python
"""Export latency table (GPU): PyTorch eager, our CUDA graph, and the exported ONNX model on
onnxruntime's CUDA and TensorRT execution providers, at batch 1 and 32, in one invocation.

    python tools/bench_export.py --out bench-export.md
    python tools/bench_export.py --models yolo9:t,yolox:s --batches 1,32 --imgsz 640

Every row is the family's inference seam (what ``model.export`` writes; NMS excluded), fp32,
random weights, median of ``--reps`` synchronized calls after ``--warmup``. The onnxruntime
rows bind GPU tensors in place (IO binding), so they time the runtime, not host copies; the
``backend`` row is ``LibreYOLO("x.onnx")`` as predict calls it (host copies included).
Whatever is missing (no GPU provider in this onnxruntime build, TensorRT libraries absent) is
skipped with a line saying so, in the report as well as on stderr.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from report import emit_report, log

from libreyolo_cudagraph import GraphRunner


def median_ms(fn: Callable[[], Any], reps: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)


def ort_rows(path: Path, x: torch.Tensor, expected: torch.Tensor, args: argparse.Namespace,
             notes: list[str]) -> list[tuple[str, float | None, float | None]]:
    """(label, ms, max abs difference to eager) per onnxruntime GPU provider found."""
    try:
        import onnxruntime as ort
    except ImportError:
        notes.append("onnxruntime is not installed: no onnxruntime rows (pip install 'libreyolo[onnx]')")
        return []
    available = ort.get_available_providers()
    wanted = {"CUDAExecutionProvider": "onnxruntime CUDA EP",
              "TensorrtExecutionProvider": "onnxruntime TensorRT EP"}
    rows: list[tuple[str, float | None, float | None]] = []
    for provider, label in wanted.items():
        if provider not in available:
            notes.append(f"{label}: skipped, onnxruntime {ort.__version__} has no {provider} "
                         f"(providers: {', '.join(available)})")
            continue
        options: dict[str, Any] = {"device_id": torch.cuda.current_device()}
        if provider == "TensorrtExecutionProvider":
            options["trt_engine_cache_enable"] = False
        try:
            session = ort.InferenceSession(str(path), providers=[(provider, options), "CPUExecutionProvider"])
            if session.get_providers()[0] != provider:
                raise RuntimeError(f"session fell back to {session.get_providers()}")
        except Exception as err:  # noqa: BLE001 - a missing TensorRT library is a skip, not a crash
            notes.append(f"{label}: skipped, the session did not start ({str(err).splitlines()[0][:200]})")
            continue
        out = torch.empty_like(expected)
        binding = session.io_binding()
        binding.bind_input(session.get_inputs()[0].name, "cuda", x.device.index or 0, np.float32, tuple(x.shape),
                           x.data_ptr())
        binding.bind_output(session.get_outputs()[0].name, "cuda", out.device.index or 0, np.float32,
                            tuple(out.shape), out.data_ptr())

        def run(session: Any = session, binding: Any = binding) -> None:
            session.run_with_iobinding(binding)

        started = time.perf_counter()
        run()  # TensorRT builds its engine on the first call
        log(f"    {label}: first call {(time.perf_counter() - started) * 1e3:.0f} ms")
        ms = median_ms(run, args.reps, args.warmup)
        rows.append((label, ms, (out - expected).abs().max().item()))
    return rows


def bench_model(family: str, size: str, args: argparse.Namespace, notes: list[str]) -> list[str]:
    from libreyolo_models import LibreYOLO

    torch.manual_seed(0)
    model = LibreYOLO(family=family, size=size, imgsz=args.imgsz).to(0).eval()
    module = model.inference_module().eval()
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = None
        try:
            onnx_path = model.export(format="onnx", dynamic=True, device="0", file=str(Path(tmp) / "m.onnx"))
        except ImportError as err:
            notes.append(f"{family}-{size}: ONNX export skipped ({err})")
        backend = LibreYOLO(onnx_path).to(0) if onnx_path is not None else None
        for batch in args.batches:
            x = torch.rand(batch, 3, args.imgsz, args.imgsz, device="cuda")
            with torch.no_grad():
                expected = module(x).clone()
                rows: list[tuple[str, float | None, float | None]] = [
                    ("PyTorch eager", median_ms(lambda x=x: module(x), args.reps, args.warmup), 0.0)]
                runner = GraphRunner(module, mode="on")
                got = runner(x)
                if runner.info().graphs:
                    rows.append(("CUDA graph (libreyolo-cudagraph)", median_ms(lambda x=x, r=runner: r(x), args.reps, args.warmup),
                                 (got - expected).abs().max().item()))
                else:
                    notes.append(f"{family}-{size} batch {batch}: not graphed {dict(runner.info().fallbacks)}")
                runner.release()
            if onnx_path is not None:
                rows += ort_rows(onnx_path, x.contiguous(), expected, args, notes)
                assert backend is not None
                got = backend.inference_forward(x)
                rows.append(("LibreYOLO('m.onnx') backend (host copies)",
                             median_ms(lambda x=x: backend.inference_forward(x), args.reps, args.warmup),
                             (got - expected).abs().max().item()))
            eager = rows[0][1]
            for label, ms, diff in rows:
                speed = f"{eager / ms:.2f}x" if ms and eager else "-"
                lines.append(f"| {family}-{size} | {batch} | {label} | {ms:.2f} | {speed} | {diff:.1e} |")
                log(f"  {family}-{size} b{batch} {label}: {ms:.2f} ms")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="yolo9:t", help="family:size,... (default yolo9:t)")
    parser.add_argument("--batches", default="1,32", type=lambda s: [int(b) for b in s.split(",")])
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_export.py needs a CUDA GPU")
    notes: list[str] = []
    try:
        import openvino  # noqa: F401

        notes.append("OpenVINO is installed but runs on the CPU here: no GPU row")
    except ImportError:
        notes.append("OpenVINO is not installed: no OpenVINO row")
    lines = [f"# Export latency ({torch.cuda.get_device_name()}, torch {torch.__version__}, "
             f"{datetime.date.today()}, imgsz {args.imgsz}, fp32, median of {args.reps})", "",
             "| model | batch | runtime | ms | vs eager | max abs diff |", "|---|---|---|---|---|---|"]
    for item in args.models.split(","):
        family, size = item.split(":")
        log(f"{family}-{size}")
        lines += bench_model(family, size, args, notes)
    lines += ["", *(f"- {note}" for note in dict.fromkeys(notes))]
    emit_report(lines, args.out)


if __name__ == "__main__":
    main()
