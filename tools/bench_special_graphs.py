#!/usr/bin/env python
"""The family-specific graph paths against eager, end to end (GPU): BiRefNet's split capture
(graphs around ``deform_conv2d``), PP-OCR's per-shape detector graphs and SAM's captured image
encoder, each through ``predict`` on the same pictures, random weights (speed and identity do not
need trained ones).

Per model: the median ms of a predict call eager and with ``cuda_graph=True`` (after warmup, the
arms taking turns in rounds so the machine's drift drops out), the ratio, and whether the
graphed results equal eager's bit for bit. PP-OCR cycles through pictures of ``--ocr-shapes``
distinct sizes, one graph each; SAM embeds a new picture on every call (its embedding cache
cleared: the encoder is what the graph replays; prompts on a cached picture never reach it).
A family whose declaration does not yet allow capture is switched on here, as its ``cuda`` test
does.

    python tools/bench_special_graphs.py --out bench-special.md
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from report import emit_report, log, median_call_ms

from libreyolo_models import SAMPLE_IMAGE, LibreYOLO


def _allow_capture(model: LibreYOLO) -> None:
    decl = dataclasses.replace(model.spec.task(model.task), inference_capture=True)
    model.spec = dataclasses.replace(model.spec, tasks={**model.spec.tasks, model.task: decl})


def _flat(results: list[Any]) -> list[torch.Tensor]:
    out = []
    for r in results:
        for name in ("masks", "ocr", "boxes"):
            value = getattr(r, name, None)
            if value is None:
                continue
            for attr in ("logits", "data", "polygons", "scores"):
                data = getattr(value, attr, None)
                if data is not None and not callable(data):
                    out.append(torch.as_tensor(np.asarray(data.cpu() if isinstance(data, torch.Tensor) else data,
                                                          dtype=np.float64 if attr != "data" else None)))
        texts = getattr(getattr(r, "ocr", None), "texts", None)
        if texts is not None:
            out.append(torch.tensor([hash(t) for t in texts], dtype=torch.int64))
    return out


def _same(a: list[Any], b: list[Any]) -> bool:
    fa, fb = _flat(a), _flat(b)
    return len(fa) == len(fb) and all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(fa, fb))


def _case(name: str, model: LibreYOLO, call: Callable[[bool], list[Any]], rounds: int, calls: int) -> list[str]:
    eager_first = call(False)
    graphed_first = call(True)
    for _ in range(3):  # warm both arms (and capture every shape)
        call(False)
        call(True)
    identical = _same(eager_first, graphed_first) and _same(call(False), call(True))
    eager_ms: list[float] = []
    graph_ms: list[float] = []
    for i in range(rounds):
        arms = [(False, eager_ms), (True, graph_ms)]
        for graphed, sink in arms if i % 2 == 0 else arms[::-1]:
            sink.append(median_call_ms(functools.partial(call, graphed), calls))
    eager, graph = statistics.median(eager_ms), statistics.median(graph_ms)
    graphs = len(model.graph_info()["graphs"])
    log(f"{name}: eager {eager:.2f} ms, graph {graph:.2f} ms, identical {identical}, graphs {graphs}")
    return [f"| {name} | {eager:.2f} | {graph:.2f} | **{eager / graph:.2f}x** | {'yes' if identical else 'NO'} | "
            f"{graphs} |"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--ocr-shapes", type=int, default=3, help="distinct picture sizes PP-OCR cycles through")
    p.add_argument("--models", default="birefnet,ppocr,sam")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_special_graphs.py needs a CUDA GPU")
    torch.backends.cudnn.benchmark = False
    image = np.asarray(__import__("PIL.Image", fromlist=["Image"]).open(SAMPLE_IMAGE).convert("RGB"))[:, :, ::-1]
    rows: list[str] = []
    chosen = args.models.split(",")
    if "birefnet" in chosen:
        torch.manual_seed(0)
        model = LibreYOLO(family="birefnet", size="t", device=0)
        _allow_capture(model)
        rows += _case("BiRefNet-t, 1024 px (split at deform_conv2d)", model,
                      lambda g: model(image, cuda_graph=g, verbose=False), args.rounds, args.calls)
        del model
    if "ppocr" in chosen:
        torch.manual_seed(0)
        model = LibreYOLO(family="ppocr", size="m", device=0)
        _allow_capture(model)
        pictures = [np.ascontiguousarray(image[: 240 + 64 * k, : 320 + 32 * k]) for k in range(args.ocr_shapes)]
        state = {"i": 0}

        def ocr(g: bool) -> list[Any]:
            state["i"] += 1
            return model(pictures[state["i"] % len(pictures)], cuda_graph=g, verbose=False)

        rows += _case(f"PP-OCR-m, {args.ocr_shapes} picture sizes (a graph per shape)", model,
                      lambda g: [r for k in range(len(pictures)) for r in ocr(g)], args.rounds, args.calls)
        del model
    if "sam" in chosen:
        torch.manual_seed(0)
        model = LibreYOLO(family="sam", size="b", device=0)
        _allow_capture(model)

        def sam(g: bool) -> list[Any]:
            model.family.embeddings.clear()  # type: ignore[attr-defined]  # a new picture each call: the encoder runs
            return model(image, points=[[200, 150]], cuda_graph=g, verbose=False)

        rows += _case("SAM-b, 1024 px, a new picture per call (encoder graphed)", model, sam, args.rounds, args.calls)
    lines = ["| path | eager ms | graphed ms | speed-up | identical to eager | graphs held |",
             "|---|---:|---:|---:|---|---:|", *rows,
             "", f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}; median of {args.rounds} rounds of "
             f"{args.calls} calls, arms taking turns; `python tools/bench_special_graphs.py`"]
    emit_report(lines, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
