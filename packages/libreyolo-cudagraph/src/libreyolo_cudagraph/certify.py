"""Certify a module's graph parity in a fresh Python process.

A failed capture can leave a CUDA context unusable (a sticky error, a stream stuck in capture
mode), so each certification runs in its own interpreter: the parent only reads back a JSON
report, and a child that crashes becomes a failed report carrying its stderr tail.

Child usage (what :func:`certify_in_subprocess` runs)::

    python -m libreyolo_cudagraph.certify --factory torchvision.models:resnet18 \
        --kwargs '{"weights": null}' --input-shape 1,3,224,224 --autocast float16 --out r.json
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from .errors import GraphConfigError
from .parity import ParityReport, contrasting_probes, verify_parity

_TAIL_CHARS = 3000


def _split_factory(factory: str) -> tuple[str, str]:
    module_name, sep, attr = factory.partition(":")
    if not sep or not module_name or not attr:
        raise GraphConfigError(
            f"factory={factory!r} is not an import path of the form 'package.module:callable' "
            "(for example 'torchvision.models:resnet18')"
        )
    return module_name, attr


def _dtype(name: str, source: str) -> torch.dtype:
    value = getattr(torch, name, None)
    if not isinstance(value, torch.dtype):
        raise GraphConfigError(
            f"{source}={name!r} is not a torch dtype name; use e.g. 'float32', 'float16', 'bfloat16'"
        )
    return value


def _tail(text: str | bytes | None) -> str:
    if text is None:
        return ""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return text[-_TAIL_CHARS:]


def certify_in_subprocess(
    factory: str,
    *,
    input_shape: Sequence[int],
    kwargs: dict[str, Any] | None = None,
    dtype: str = "float32",
    autocast: str | None = None,
    device: str = "cuda",
    channels_last: bool = False,
    timeout_s: float = 600.0,
) -> ParityReport:
    """Build a module from ``factory`` in a fresh interpreter and run :func:`verify_parity` there.

    Args:
        factory: ``"package.module:callable"``; ``callable(**kwargs)`` returns the module. It
            must be importable from a fresh interpreter started in the current directory.
        input_shape: shape of the single input tensor, e.g. ``(1, 3, 224, 224)``.
        kwargs: JSON-serialisable keyword arguments for the factory.
        dtype: input dtype name. Without autocast, a non-float32 dtype also converts the module.
        autocast: CUDA autocast dtype name (``"float16"``, ``"bfloat16"``) or None.
        device: device for module and probes.
        channels_last: convert module and probes to channels_last.
        timeout_s: the child is killed after this many seconds (a failed report results).

    Returns:
        The child's report; or a failed report (``graphed=False``) whose ``reason`` carries the
        exit status and stderr tail when the child crashed or timed out.
    """
    _split_factory(factory)
    _dtype(dtype, "dtype")
    if autocast is not None:
        _dtype(autocast, "autocast")
    try:
        kwargs_json = json.dumps(kwargs or {})
    except TypeError as err:
        raise GraphConfigError(
            f"certify_in_subprocess(kwargs=...) must be JSON-serialisable: {err}"
        ) from None
    with tempfile.TemporaryDirectory(prefix="libreyolo-certify-") as tmp:
        out = Path(tmp) / "report.json"
        cmd = [
            sys.executable,
            "-m",
            "libreyolo_cudagraph.certify",
            "--factory",
            factory,
            "--kwargs",
            kwargs_json,
            "--input-shape",
            ",".join(str(int(s)) for s in input_shape),
            "--dtype",
            dtype,
            "--device",
            device,
            "--out",
            str(out),
        ]
        if autocast is not None:
            cmd += ["--autocast", autocast]
        if channels_last:
            cmd.append("--channels-last")
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as err:
            return ParityReport(
                factory,
                graphed=False,
                reason=f"certification timed out after {timeout_s:g} s; stderr tail:\n{_tail(err.stderr)}",
            )
        if proc.returncode != 0 or not out.exists():
            return ParityReport(
                factory,
                graphed=False,
                reason=f"certification process exited with status {proc.returncode}; stderr tail:\n{_tail(proc.stderr)}",
            )
        return ParityReport.from_dict(json.loads(out.read_text()))


def build_module(factory: str, kwargs: dict[str, Any]) -> nn.Module:
    """Import ``factory`` and call it with ``kwargs``; the result must be an ``nn.Module``."""
    module_name, attr = _split_factory(factory)
    target: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    built = target(**kwargs)
    if not isinstance(built, nn.Module):
        raise GraphConfigError(f"factory {factory!r} returned a {type(built).__name__}, not an nn.Module")
    return built


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m libreyolo_cudagraph.certify", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--factory", required=True, help="package.module:callable returning the module")
    parser.add_argument("--kwargs", default="{}", help="JSON object of keyword arguments for the factory")
    parser.add_argument("--input-shape", required=True, help="comma-separated, e.g. 1,3,224,224")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--autocast", default=None, help="CUDA autocast dtype, e.g. float16")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--out", required=True, help="where to write the JSON report")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Child entry point: build, verify, write the report as JSON. Exit 0 when a report was written."""
    args = _parser().parse_args(argv)
    device = torch.device(args.device)
    dtype = _dtype(args.dtype, "--dtype")
    shape = [int(s) for s in args.input_shape.split(",") if s.strip()]
    module = build_module(args.factory, json.loads(args.kwargs)).to(device).eval()
    if args.autocast is None and dtype != torch.float32:
        module = module.to(dtype)
    probes: tuple[tuple[Tensor, ...], tuple[Tensor, ...]] = contrasting_probes(shape, dtype, device)
    probe_a, probe_b = probes
    if args.channels_last:
        module = module.to(memory_format=torch.channels_last)
        probe_a = tuple(p.contiguous(memory_format=torch.channels_last) for p in probe_a)
        probe_b = tuple(p.contiguous(memory_format=torch.channels_last) for p in probe_b)
    amp: AbstractContextManager[Any] = nullcontext()
    if args.autocast is not None:
        amp = torch.autocast(device.type, dtype=_dtype(args.autocast, "--autocast"), cache_enabled=False)
    with amp:
        report = verify_parity(module, probe_a, probe_b, name=args.factory)
    Path(args.out).write_text(json.dumps(report.to_dict()))
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)  # the child is a program: it may configure
    sys.exit(main())
