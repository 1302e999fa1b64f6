"""The benchmark job: export the model once per format (and precision asked), load each file back
on its runtime, and measure it the way users meet it.

- **size**: the weights (PyTorch: the state dict's tensors, not a training checkpoint's
  optimizer and EMA) or what the export wrote (a folder: all its files), MiB.
- **latency**: median wall time of one batch-1 call of the inference seam (the network and the
  runtime, no pre- or post-processing), after ``warmup`` calls. Measured after every format is
  exported and validated, the formats taking turns over five rounds, so a burst of load on a
  shared machine falls on all of them rather than on whichever ran then.
- **accuracy**: ``val`` on ``data`` through the same task code for every format, so the numbers
  differ only by what the format changed.

A format that fails to export or load gets a row with the reason instead of stopping the run; one
that converts here but runs elsewhere (CoreML on Linux) gets its size and a note.
"""

from __future__ import annotations

import importlib.util
import logging
import statistics
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..config import load_config
from ..devices import default_device
from ..errors import ConfigError
from ..export.exporter import export_model
from ..export.targets import TARGETS, get_target
from ..handle import ModelHandle
from ..rundir import next_run_dir
from ..val.entry import validate_model
from .settings import BenchmarkConfig

if TYPE_CHECKING:
    from collections.abc import Callable

log = logging.getLogger(__name__)

RUNTIME_MODULES: dict[str, tuple[str, ...]] = {
    "onnx": ("onnx", "onnxruntime"), "torchscript": (), "openvino": ("openvino",), "ncnn": ("pnnx", "ncnn"),
    "tflite": ("onnx2tf", "ai_edge_litert"), "coreml": ("coremltools",), "engine": ("tensorrt",),
}
"""What must be importable for a format's row: its converter and its runtime (looked up, not imported)."""


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def available_formats(device: torch.device) -> list[str]:
    """Every export format whose converter and runtime are installed (TensorRT: on a CUDA device)."""
    return [fmt for fmt, modules in RUNTIME_MODULES.items()
            if all(_installed(m) for m in modules) and (not get_target(fmt).needs_cuda or device.type == "cuda")]


@dataclass(frozen=True)
class BenchmarkRow:
    """One format at one precision: size in MiB, batch-1 latency in ms, the task's headline metrics
    (``val``'s ``as_dict``); None where not measured, with the reason in ``note``."""

    format: str
    precision: str
    size_mib: float | None = None
    latency_ms: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    note: str = ""


@dataclass(frozen=True)
class BenchmarkResult:
    """The rows of one benchmark run and what they were measured on."""

    rows: list[BenchmarkRow]
    model: str
    data: str
    imgsz: int
    device: str

    def table(self) -> str:
        """A plain-text table, one line per row."""
        keys = list(dict.fromkeys(k for row in self.rows for k in row.metrics))
        heads = ["format", "weights", "size MiB", "latency ms", *[k.split("/")[-1] for k in keys]]
        lines = [[row.format, row.precision, _num(row.size_mib, 1), _num(row.latency_ms, 2),
                  *[_num(row.metrics.get(k), 4) for k in keys]] for row in self.rows]
        widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(heads)]
        out = [f"benchmark of {self.model} on {self.data}, imgsz {self.imgsz}, {self.device}",
               "  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True))]
        for row, line in zip(self.rows, lines, strict=True):
            text = "  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True))
            out.append(f"{text}  {row.note}".rstrip())
        return "\n".join(out)


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else path.stat().st_size


def _plan(cfg: BenchmarkConfig, device: torch.device) -> list[tuple[str, str]]:
    """(format, precision) pairs in table order: each format fp32, then fp16 and int8 rows asked."""
    wanted = cfg.format_list()
    formats = wanted if wanted is not None else ["pytorch", *available_formats(device)]
    plan = [(fmt, "fp32") for fmt in formats]
    if cfg.half:
        plan += [(fmt, "fp16") for fmt in formats
                 if fmt != "pytorch" and (get_target(fmt).half_on_cpu or device.type == "cuda")]
    if cfg.int8:
        plan += [(fmt, "int8") for fmt in formats if fmt in TARGETS and TARGETS[fmt].int8]
    return plan


ROUNDS = 5


def _latencies_ms(handles: list[ModelHandle], imgsz: int, cfg: BenchmarkConfig) -> list[float]:
    """Median batch-1 seam time per handle, the handles taking turns over ``ROUNDS`` rounds."""
    times: list[list[float]] = [[] for _ in handles]
    inputs = [torch.rand(1, 3, imgsz, imgsz, generator=torch.Generator().manual_seed(0)).to(h.device) for h in handles]
    per_round = max(1, -(-cfg.runs // ROUNDS))
    with torch.no_grad():
        for handle, images in zip(handles, inputs, strict=True):
            for _ in range(cfg.warmup):
                handle.inference_forward(images)
        for _ in range(ROUNDS):
            for i, (handle, images) in enumerate(zip(handles, inputs, strict=True)):
                sync: Callable[[], None] = torch.cuda.synchronize if handle.device.type == "cuda" else (lambda: None)
                for _ in range(per_round):
                    start = time.perf_counter()
                    handle.inference_forward(images)
                    sync()
                    times[i].append((time.perf_counter() - start) * 1000)
    return [statistics.median(t) for t in times]


def _metrics(handle: ModelHandle, imgsz: int, cfg: BenchmarkConfig) -> dict[str, float]:
    metrics = validate_model(handle, {"data": cfg.data, "imgsz": imgsz, "batch": cfg.batch, "device": cfg.device,
                                      "workers": 0, "verbose": cfg.verbose})
    return dict(metrics.as_dict())


def _row(model: ModelHandle, fmt: str, precision: str, imgsz: int, folder: Path,
         cfg: BenchmarkConfig) -> tuple[BenchmarkRow, ModelHandle | None]:
    """The row without its latency, and the handle to time (None when it does not run here)."""
    if fmt == "pytorch":
        size = sum(t.numel() * t.element_size() for t in model.net.state_dict().values())
        return BenchmarkRow(fmt, precision, size / 2**20, metrics=_metrics(model, imgsz, cfg)), model
    target = get_target(fmt)
    options: dict[str, Any] = {"format": fmt, "imgsz": imgsz, "device": cfg.device,
                               "file": str(folder / f"model_{precision}{target.suffix}")}
    if precision == "fp16":
        options["half"] = True
    if precision == "int8":
        options.update(int8=True, data=cfg.data, calib_images=cfg.calib_images)
    path = export_model(model, options)
    size = _bytes(path) / 2**20
    if not target.runs_here:
        return BenchmarkRow(fmt, precision, size, note="converted; its runtime is not on this OS"), None
    runtime = ModelHandle.from_exported(path, None, imgsz)
    return BenchmarkRow(fmt, precision, size, metrics=_metrics(runtime, imgsz, cfg)), runtime


def run_benchmark(model: ModelHandle, options: dict[str, Any]) -> BenchmarkResult:
    """Export and measure ``model`` in every format asked (``BenchmarkConfig``); a format that
    fails gets a row saying why, and the run goes on."""
    cfg = load_config(BenchmarkConfig, options, "benchmark()")
    model.require_pytorch("benchmark (it exports the PyTorch model to every format)")
    device = default_device(cfg.device, model.device)
    imgsz = model.resolve_imgsz(cfg.imgsz)
    data = model.task_spec.load_data(cfg.data)
    if data.nc != model.nc:  # before any export: every row would fail on it
        raise ConfigError(f"benchmark(data={cfg.data!r}): the dataset has {data.nc} classes but the model predicts "
                          f"{model.nc}; benchmark on the dataset the model was trained for")
    folder = next_run_dir(cfg.project, "exp")
    rows: list[BenchmarkRow] = []
    timed: dict[int, ModelHandle] = {}
    for fmt, precision in _plan(cfg, device):
        log.info("benchmark: %s %s", fmt, precision)
        try:
            row, handle = _row(model, fmt, precision, imgsz, folder, cfg)
        except (ImportError, ConfigError, RuntimeError, OSError) as err:
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            log.warning("benchmark: %s %s failed: %s", fmt, precision, reason)
            row, handle = BenchmarkRow(fmt, precision, note=f"failed: {reason}"), None
        if handle is not None:
            timed[len(rows)] = handle
        rows.append(row)
    for index, latency in zip(timed, _latencies_ms(list(timed.values()), imgsz, cfg), strict=True):
        rows[index] = replace(rows[index], latency_ms=latency)
    name = str(model.ckpt_path) if model.ckpt_path else f"{model.spec.name}-{model.size} (untrained)"
    result = BenchmarkResult(rows, name, cfg.data, imgsz, str(device))
    log.info("benchmark files in %s\n%s", folder, result.table())
    return result
