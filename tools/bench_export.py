#!/usr/bin/env python
"""Export latency table: PyTorch eager, our CUDA graph and the exported ONNX model on every
onnxruntime execution provider this machine has, at batch 1 and 32, in one invocation.

    python tools/bench_export.py --out bench-export.md            # GPU machine, ~1-3 minutes
    python tools/bench_export.py --models yolo9:t,yolox:s --batches 1,32 --imgsz 640
    python tools/bench_export.py --device cpu --imgsz 64 --batches 1,2 --reps 3   # smoke test

Runs from source (``tools/gpu_session.sh bench_export`` puts the packages on ``PYTHONPATH``).
Every row is the family's inference seam (what ``model.export`` writes; NMS excluded), fp32,
random weights, median of ``--reps`` synchronized calls after ``--warmup`` (a row stops early
after ``--row-seconds``, with at least 3 calls, and its warmup after a third of that, so slow CPU
rows cannot eat the session). GPU
execution providers bind CUDA tensors in place (IO binding): they time the runtime, not host
copies. The CPU execution provider times ``session.run`` on an input already on the host. The
report's header lists onnxruntime's providers and says plainly when CUDA / TensorRT are absent;
whatever is missing (onnx or onnxruntime not installed, a TensorRT library absent) is a line in
the report, never a crash.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from report import emit_report, log

GPU_PROVIDERS = {"CUDAExecutionProvider": "onnxruntime CUDA EP", "TensorrtExecutionProvider": "onnxruntime TensorRT EP"}
Row = tuple[str, float, float]  # label, ms, max abs difference to eager


def median_ms(fn: Callable[[], Any], args: argparse.Namespace, device: torch.device) -> float:
    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    started_warmup = time.perf_counter()
    for _ in range(args.warmup):  # at least one call, then no more than a third of the row's time
        fn()
        if time.perf_counter() - started_warmup > args.row_seconds / 3:
            break
    sync()
    times: list[float] = []
    started_row = time.perf_counter()
    while len(times) < args.reps and (len(times) < 3 or time.perf_counter() - started_row < args.row_seconds):
        started = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)


def onnxruntime_providers(notes: list[str]) -> tuple[Any, list[str]]:
    """(the onnxruntime module or None, its providers); notes say what is absent."""
    try:
        import onnxruntime as ort
    except ImportError:
        notes.append("onnxruntime is not installed: no onnxruntime rows (pip install 'libreyolo[onnx]')")
        return None, []
    available = list(ort.get_available_providers())
    missing = [label.removeprefix("onnxruntime ") for name, label in GPU_PROVIDERS.items() if name not in available]
    if missing:
        notes.append(f"{'/'.join(m.removesuffix(' EP') for m in missing)} EP not available on this machine "
                     f"(onnxruntime {ort.__version__} providers: {', '.join(available)}); its rows are absent")
    return ort, available


def ort_rows(ort: Any, available: list[str], path: Path, x: torch.Tensor, expected: torch.Tensor,
             args: argparse.Namespace, notes: list[str], tag: str) -> list[Row]:
    """One row per usable provider: the GPU ones when ``x`` is on a GPU, then the CPU one."""
    rows: list[Row] = []
    if x.device.type == "cuda":
        for provider, label in GPU_PROVIDERS.items():
            if provider not in available:
                continue
            options: dict[str, Any] = {"device_id": x.device.index or 0}
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
            log(f"    {tag} {label}: first call {(time.perf_counter() - started) * 1e3:.0f} ms")
            rows.append((label, median_ms(run, args, x.device), (out - expected).abs().max().item()))
    if "CPUExecutionProvider" in available and not args.no_ort_cpu:
        settings = ort.SessionOptions()
        settings.log_severity_level = 3
        session = ort.InferenceSession(str(path), settings, providers=["CPUExecutionProvider"])
        feed = {session.get_inputs()[0].name: np.ascontiguousarray(x.cpu().numpy())}
        got = torch.from_numpy(session.run(None, feed)[0])
        rows.append(("onnxruntime CPU EP", median_ms(lambda: session.run(None, feed), args, torch.device("cpu")),
                     (got - expected.cpu()).abs().max().item()))
    return rows


def bench_model(family: str, size: str, args: argparse.Namespace, device: torch.device, ort: Any,
                available: list[str], notes: list[str]) -> list[str]:
    from libreyolo_cudagraph import GraphRunner
    from libreyolo_models import LibreYOLO

    tag = f"{family}-{size}"
    torch.manual_seed(0)
    model = LibreYOLO(family=family, size=size, imgsz=args.imgsz).to(device).eval()
    module = model.inference_module().eval()
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = None
        if ort is not None:
            try:
                started = time.perf_counter()
                onnx_path = model.export(format="onnx", dynamic=True,
                                         device=str(device.index or 0) if device.type == "cuda" else "cpu",
                                         file=str(Path(tmp) / "m.onnx"))
                log(f"  {tag}: ONNX export {time.perf_counter() - started:.1f} s")
            except ImportError as err:
                notes.append(f"{tag}: ONNX export skipped, so no onnxruntime rows ({err})")
        gpu_ep = any(p in available for p in GPU_PROVIDERS) and device.type == "cuda"
        backend = LibreYOLO(onnx_path).to(device) if onnx_path is not None and gpu_ep else None
        for batch in args.batches:
            x = torch.rand(batch, 3, args.imgsz, args.imgsz, device=device)
            with torch.no_grad():
                expected = module(x).clone()
                rows: list[Row] = [("PyTorch eager", median_ms(functools.partial(module, x), args, device), 0.0)]
                if device.type == "cuda":
                    runner = GraphRunner(module, mode="on")
                    got = runner(x)
                    if runner.info().graphs:
                        rows.append(("CUDA graph (libreyolo-cudagraph)",
                                     median_ms(functools.partial(runner, x), args, device),
                                     (got - expected).abs().max().item()))
                    else:
                        notes.append(f"{tag} batch {batch}: not graphed {dict(runner.info().fallbacks)}")
                    runner.release()
                else:
                    notes.append("no CUDA device: no CUDA graph row")
            if onnx_path is not None:
                rows += ort_rows(ort, available, onnx_path, x.contiguous(), expected, args, notes, f"{tag} b{batch}")
            if backend is not None:
                got = backend.inference_forward(x)
                rows.append(("LibreYOLO('m.onnx') backend (host copies)",
                             median_ms(functools.partial(backend.inference_forward, x), args, device),
                             (got - expected).abs().max().item()))
            eager = rows[0][1]
            for label, ms, diff in rows:
                lines.append(f"| {tag} | {batch} | {label} | {ms:.2f} | {eager / ms:.2f}x | {diff:.1e} |")
                log(f"  {tag} b{batch} {label}: {ms:.2f} ms")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="yolo9:t", help="family:size,... (default yolo9:t)")
    parser.add_argument("--batches", default=[1, 32], type=lambda s: [int(b) for b in s.split(",")])
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--row-seconds", type=float, default=15.0, help="stop a row's reps after this (min 3)")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (a smoke test of the script)")
    parser.add_argument("--no-ort-cpu", action="store_true", help="leave out the onnxruntime CPU EP rows")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench_export.py: no CUDA GPU here; pass --device cpu for a CPU smoke run")
    notes: list[str] = []
    ort, available = onnxruntime_providers(notes)
    try:
        import openvino  # noqa: F401

        notes.append("OpenVINO is installed but runs on the CPU here: no OpenVINO row")
    except ImportError:
        notes.append("OpenVINO is not installed: no OpenVINO row")
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({platform.processor() or 'cpu'})"
    providers = f"onnxruntime {ort.__version__}: {', '.join(available)}" if ort is not None else "no onnxruntime"
    lines = [f"# Export latency ({where}, torch {torch.__version__}, {datetime.date.today()}, imgsz {args.imgsz}, "
             f"fp32, median of up to {args.reps})", "", f"Execution providers: {providers}.", "",
             "| model | batch | runtime | ms | vs eager | max abs diff |", "|---|---|---|---|---|---|"]
    started = time.perf_counter()
    for item in args.models.split(","):
        family, size = item.split(":")
        log(f"{family}-{size}")
        lines += bench_model(family, size, args, device, ort, available, notes)
    notes.append(f"whole run {time.perf_counter() - started:.0f} s")
    lines += ["", *(f"- {note}" for note in dict.fromkeys(notes))]
    emit_report(lines, args.out)


if __name__ == "__main__":
    main()
