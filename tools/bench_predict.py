#!/usr/bin/env python
"""End-to-end predict benchmark (GPU): our arms and Ultralytics' predict on the same files, one run.

Scenarios, each for every arm:

- ``image, interleaved`` (first): the same JPEG at batch 1 with our arms and Ultralytics' predict
  (in this process) taking turns, ``--interleave-rounds`` rounds of ``--interleave-calls`` calls
  each, the ratio to the peer taken within each round, so the machine's drift between arms'
  moments drops out;
- ``image``: one 1280x720 JPEG at batch 1, median of ``--reps`` calls (after warmup);
- ``folder``: ``--images`` JPEGs streamed at ``--batch``, images/s (photos: 720p and 1080p
  landscape and 1080x1920 portrait in turn; synthetic: 1280x720);
- ``video``: a ``--video-s`` second 30 fps H.264 video the script writes (photos: a 1080p pan over
  a photograph; synthetic: 720p moving shapes; PyAV, else OpenCV; the scenario is skipped with a
  line when neither is installed), streamed at ``--batch``.

``--set photos`` (the default) makes them from the photographs in ``tools/photos/``, ``--set
synthetic`` from smooth synthetic scenes (``predict_media``).

Arms: ``eager`` (fp32, defaults: fused), ``eager-unfused`` (fp32, ``fuse=False``), ``graph``
(fp32, fused, ``cuda_graph=True``), ``half+fuse+graph`` (fp16 weights, fused, graphed): all decode as
the install does by default (``gpu_decode="auto"``: JPEGs on the GPU with TorchCodec's nvJPEG where
the ``nvjpeg`` extra is installed, else torchvision's, which the default install has; the notes
say which ran); ``eager-cpu``, ``graph-cpu`` and ``half+fuse+graph-cpu`` decode JPEGs on the CPU
(``gpu_decode=False``: PIL, or torchvision's libjpeg-turbo for a plain full-size JPEG, at a reduced
DCT scale where the letterbox allows: validation's pixels); ``eager-nvjpeg`` and ``graph-nvjpeg``
insist on the device decoder (``gpu_decode=True``: an error when none loads); and ``ultralytics`` (``tools/peer_ultralytics.py predict`` in a
subprocess, the same files; skipped with a line when it is not importable). An arm named twice
in ``--arms`` runs twice (the second as ``<arm> (again)``): the spread within one invocation. For ours: per-phase
times (decode on the prefetch thread, preprocess, network, postprocess: ms per image, means of
``Results.speed``), peak GPU memory per arm (allocated: live tensors; reserved: what the
caching allocator holds, graph pools included, what ``nvidia-smi`` shows) and the graph pools' bytes. Then a network-only
table (``network_only``; ``--arms ''`` runs it alone): the fused network in fp16 and fp32, NCHW and
channels_last, eager, graphed (``GraphRunner``) with and without cuDNN's autotuner,
``torch.compile(mode="reduce-overhead")``, and our graph over ``torch.compile(mode="default")``
(what ``predict(compile=True, cuda_graph=True)`` runs), at batch 1 and ``--batch`` (CUDA events,
medians; ``--net-dtypes`` and ``--net-batches`` narrow it). Ratios are printed
against eager and against Ultralytics.

    python tools/bench_predict.py --out bench-predict.md
    python tools/bench_predict.py --images 200 --video-s 5 --no-compile   # a quick look

Random weights (``--size`` of YOLOv9, the same ``yolov9<size>.yaml`` for the peer); our class scores
sit at the head's prior (``fresh_model``), so detections are few and NMS is cheap for both. ``--data-dir`` keeps the generated files between runs.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from PIL import Image
from predict_media import one_image, write_images, write_video
from report import emit_report, fmt, log, median_call_ms

if TYPE_CHECKING:  # imported where used, so --help and the data writers need no model code
    from libreyolo_models import LibreYOLO

_CPU = {"gpu_decode": False}
_HFG = {"half": True, "fuse": True, "cuda_graph": True}
ARMS = {"eager": {}, "eager-unfused": {"fuse": False}, "graph": {"cuda_graph": True}, "half+fuse+graph": _HFG,
        "eager-cpu": _CPU, "graph-cpu": {"cuda_graph": True, **_CPU}, "half+fuse+graph-cpu": {**_HFG, **_CPU},
        "eager-nvjpeg": {"gpu_decode": True}, "graph-nvjpeg": {"cuda_graph": True, "gpu_decode": True}}
"""Predict options per arm. YOLOv9 predicts fused by default (``TaskDecl.inference_fuse``), so
``eager`` and ``graph`` run the fused copy; ``eager-unfused`` is the exact network (``fuse=False``).
The ``-cpu`` arms decode JPEGs on the CPU (``gpu_decode=False``), the rest as the install does by
default. The video scenario leaves ``gpu_decode`` at its default (``VIDEO_DEFAULT``): ``False``
would also keep video frames' colour conversion on the host, where the default install converts
them on the GPU (PyAV's planes; no extra needed)."""
VIDEO_DEFAULT = ("gpu_decode",)
PHASES = ("decode", "preprocess", "inference", "postprocess")


# --------------------------------------------------------------------------- our arms
def fresh_model(size: str, imgsz: int, *, prior_scores: bool = True) -> LibreYOLO:
    """A random YOLOv9 with BatchNorm statistics from one batch (so fp16 stays finite).

    With those weights about 1,900 boxes per image clear conf 0.25, against a handful for a
    freshly built Ultralytics model, so post-processing would compare unequal workloads.
    ``prior_scores`` zeroes our last class convolutions, leaving every class score at the head's
    prior (about 1e-4), like a new Ultralytics head's; ``--busy-scores`` keeps the busy case.
    The table's detections column shows each side's count."""
    from libreyolo_models import LibreYOLO

    torch.manual_seed(0)
    model = LibreYOLO(family="yolo9", size=size, imgsz=imgsz)
    norms = [m for m in model.net.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    for m in norms:  # BatchNorm statistics from one batch, so fp16 stays finite
        m.momentum = 1.0
    model.net.train()
    with torch.no_grad():
        model.net(torch.rand(2, 3, imgsz, imgsz))
        if prior_scores:  # the last class conv of each level zeroed: every score is the class prior
            for branch in model.net.get_submodule("head.cv3").children():  # per level: conv, conv, 1x1 conv
                last = list(branch.children())[-1]
                assert isinstance(last, torch.nn.Conv2d), f"YOLOv9's class branch ends in {type(last).__name__}"
                last.weight.zero_()
    model.net.eval()
    return model


def phase_means(results: Iterable[Any]) -> tuple[int, dict[str, float]]:
    """Images seen and mean ms per phase; ``dets`` is the mean detections per image (the
    post-processing workload, which random weights make far larger than a trained model's)."""
    sums = dict.fromkeys(PHASES, 0.0)
    n = dets = 0
    for res in results:
        n += 1
        dets += len(res.boxes) if res.boxes is not None else 0
        for k in PHASES:
            sums[k] += res.speed.get(k, 0.0)
    return n, {k: v / max(n, 1) for k, v in sums.items()} | {"dets": dets / max(n, 1)}


def run_ours(arm: str, args: argparse.Namespace, image: Path, folder: Path | None, video: Path | None) -> dict[str, Any]:
    options = {"device": 0, "imgsz": args.imgsz, "conf": args.conf, **ARMS[arm]}
    model = fresh_model(args.size, args.imgsz, prior_scores=not args.busy_scores)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    out: dict[str, Any] = {}
    for _ in range(args.warmup):
        model.predict(image, **options)
    times, speeds = [], []
    for _ in range(getattr(args, "image_reps", args.reps)):
        t0 = time.perf_counter()
        (res,) = model.predict(image, **options)
        times.append((time.perf_counter() - t0) * 1e3)
        speeds.append(res)
    if times:
        out["image_ms"] = statistics.median(times)
        out["image_phases"] = phase_means(speeds)[1]
    if folder is not None:
        model.predict(str(folder), batch=args.batch, stream=True, **options).__next__()  # capture the batch shape
        t0 = time.perf_counter()
        n, out["folder_phases"] = phase_means(model.predict(str(folder), batch=args.batch, stream=True, **options))
        out["folder_per_s"] = n / (time.perf_counter() - t0)
    if video is not None:
        video_options = {k: v for k, v in options.items() if k not in VIDEO_DEFAULT or v is not False}
        # capture the batch shape (and open PyAV once) outside the timed run
        next(iter(model.predict(str(video), batch=args.batch, stream=True, **video_options)))
        try:
            t0 = time.perf_counter()
            n, out["video_phases"] = phase_means(model.predict(str(video), batch=args.batch, stream=True,
                                                               **video_options))
            out["video_per_s"] = n / (time.perf_counter() - t0)
        except Exception as err:  # noqa: BLE001 - the image and folder readings of this arm still stand
            out["video_error"] = f"{type(err).__name__}: {str(err)[:300]}"
    out["peak_mib"] = torch.cuda.max_memory_allocated() / 2**20
    out["reserved_mib"] = torch.cuda.max_memory_reserved() / 2**20
    out["pool_mib"] = sum(g["pool_bytes"] or 0 for g in model.graph_info()["graphs"]) / 2**20
    if options.get("cuda_graph") or options.get("compile"):
        out["boxes_vs_eager"] = boxes_against_eager(model, image, options)
    model.release_graphs()
    del model
    torch.cuda.empty_cache()
    return out


def boxes_against_eager(model: LibreYOLO, image: Path, options: dict[str, Any]) -> str:
    """Whether ``options``' boxes for ``image`` equal those of the same options uncaptured and
    uncompiled (the acceptance's "every arm's boxes equal eager's"), at conf 0 so that the
    random network's boxes are there to compare (its class scores sit at the prior)."""
    kept = {**options, "conf": 0.0}
    (ours,) = model.predict(image, **kept)
    (eager,) = model.predict(image, **{**kept, "cuda_graph": False, "compile": False})
    a, b = ours.boxes.data.cpu(), eager.boxes.data.cpu()
    if a.shape == b.shape and torch.equal(a, b):
        return f"identical ({len(a)} boxes)"
    gap = float((a - b).abs().max()) if a.shape == b.shape else float("nan")
    return f"DIFFER: {len(a)} against {len(b)} boxes, largest difference {gap:.3g}"


def peer_predictor(args: argparse.Namespace) -> tuple[Callable[[Path], Any] | None, str]:
    """Ultralytics' ``YOLO.predict`` in this process (for the interleaved scenario), or why not."""
    import os

    os.environ.setdefault("YOLO_OFFLINE", "1")
    try:
        from ultralytics import YOLO
    except ImportError as err:
        return None, f"Ultralytics not importable in this process ({err})"
    torch.manual_seed(0)
    peer = YOLO(f"yolov9{args.size}.yaml")
    kw = {"imgsz": args.imgsz, "device": 0, "verbose": False, "conf": args.conf}
    return (lambda path: peer.predict(str(path), **kw)), "in this process"


def interleaved_image(arms: list[str], args: argparse.Namespace, image: Path) -> list[str]:
    """Batch-1 file-to-``Results`` latency with every arm, the peer's included, taking turns in one process.

    The separate ``image`` scenario runs each arm once, at its own moment, and the peer in a fresh
    child process: a host-bound call's time follows the machine's state, which moved 2x within one
    run (``tools/probe_eager_host.py``), so those ratios carry the drift between the arms'
    moments. Here each round runs ``--interleave-calls`` calls of each arm, the order rotating
    round to round, and the ratio is taken within each round: arms that share a moment share
    the machine's state.
    """
    ours = [a for a in dict.fromkeys(arms) if a in ARMS]
    callers: dict[str, Callable[[], Any]] = {}
    models = []
    for arm in ours:
        model = fresh_model(args.size, args.imgsz, prior_scores=not args.busy_scores)
        options = {"device": 0, "imgsz": args.imgsz, "conf": args.conf, **ARMS[arm]}
        models.append(model)
        callers[arm] = functools.partial(model.predict, image, **options)
    peer, why = peer_predictor(args) if "ultralytics" in arms else (None, "not in --arms")
    if peer is not None:
        callers["ultralytics"] = lambda: peer(image)
    if len(callers) < 2 or args.interleave_rounds <= 0:
        return [f"Interleaved scenario not run: {len(callers)} arm(s) (Ultralytics: {why}), "
                f"--interleave-rounds {args.interleave_rounds}."]
    names = list(callers)
    for fn in callers.values():
        for _ in range(args.warmup):
            fn()
    rounds: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.interleave_rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            rounds[name].append(median_call_ms(callers[name], args.interleave_calls))
    lines = ["", f"Batch 1, file to `Results`, arms taking turns in one process ({args.interleave_rounds} rounds of "
             f"{args.interleave_calls} calls per arm, the order rotating; Ultralytics {why}; ms, median of each "
             "round's median):", "",
             "| arm | ms | per round | vs Ultralytics (median of the rounds' ratios) | rounds at or under the peer |",
             "|---|---:|---|---:|---:|"]
    peer_rounds = rounds.get("ultralytics")
    for name in names:
        per = rounds[name]
        vs, wins = "-", "-"
        if peer_rounds and name != "ultralytics":
            ratios = [p / o for p, o in zip(peer_rounds, per)]
            vs, wins = f"{statistics.median(ratios):.2f}x", f"{sum(x >= 1.0 for x in ratios)} of {len(ratios)}"
        lines.append(f"| {name} | {statistics.median(per):.2f} | {', '.join(f'{v:.1f}' for v in per)} | {vs} | {wins} |")
    for model in models:
        model.release_graphs()
    del models, callers
    torch.cuda.empty_cache()
    return lines


def median_host_ms(fn: Callable[[], Any], reps: int) -> float:
    """Median wall time of ``fn()`` followed by a device synchronisation."""
    def synced() -> None:
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    return median_call_ms(synced, reps)


def settle_machine(seconds: float, size: str = "t", imgsz: int = 640, device: str = "cuda:0") -> str:
    """Run the eager fused forward at batch 1 for ``seconds`` before any arm; returns a note.

    A host-bound eager call's time follows the machine's state: in one ``tools/probe_eager_host.py``
    run both networks, ours and Ultralytics', took about 19 ms a call for the first 15 s of steady
    work and 8.5 ms afterwards; in a settled bench run, 14.2 ms at first, 9.1-9.3 after 5 s and
    11.7-12.4 after 20 s. Settling first keeps any arm from meeting a cold machine; it does not
    remove the spread, so the note records the trace (per-call time every 5 s).
    """
    if seconds <= 0:
        return "machine not settled before the arms (--settle-s 0)"
    model = fresh_model(size, imgsz).to(device)
    fused, x = model.fused_net(), torch.rand(1, 3, imgsz, imgsz, device=device)
    trace: list[tuple[float, float]] = []  # (seconds since the start, median ms of 20 calls)
    start = time.perf_counter()
    with torch.inference_mode():
        while (elapsed := time.perf_counter() - start) < seconds:
            trace.append((elapsed, median_host_ms(lambda: model.inference_forward(x, fused), 20)))
    marks = [p for i, p in enumerate(trace) if i == 0 or int(p[0] / 5) != int(trace[i - 1][0] / 5)]  # one per 5 s
    return (f"machine settled for {seconds:.0f} s before the arms (eager fused forward, batch 1): "
            f"{trace[0][1]:.1f} ms a call at first, {trace[-1][1]:.1f} at the end; "
            + ", ".join(f"{ms:.1f} at {t:.0f} s" for t, ms in marks))


# --------------------------------------------------------------------------- network only
def median_ms(fn: Callable[[], Any], reps: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def network_only(args: argparse.Namespace) -> list[str]:
    """The fused network alone (``--net-dtypes``, ``--net-batches``), NCHW and channels_last (a copy
    of the network and its input in that layout): eager; our graph (``GraphRunner``) with cuDNN's
    heuristics and with its autotuner on for warmup, capture and replay (``bits``: whether that
    graph returns exactly what the autotuned eager call returns); in fp16,
    ``torch.compile(mode="reduce-overhead")`` of the NCHW network (compile picks its own layout;
    Inductor's CUDA graphs) and our graph over ``torch.compile(mode="default")`` of each layout
    (Inductor's kernels, our graph: what ``predict(compile=True, cuda_graph=True)`` runs;
    ``bits``: whether it returns exactly what the compiled call returns)."""
    import copy

    rows = ["| batch | layout | eager ms | graph ms | graph autotuned ms | bits | compile(reduce-overhead) ms "
            "| our graph of compile(default) ms | bits | graph/compile | our graph of compile/compile |",
            "|---:|---|---:|---:|---:|---|---:|---:|---|---:|---:|"]
    batches = sorted({int(b) for b in args.net_batches.split(",")} if args.net_batches else {1, args.batch})
    for dtype in filter(None, args.net_dtypes.split(",")):
        model = fresh_model(args.size, args.imgsz).to(0)
        net = model.fused_net()  # folded from fp32 statistics, then cast with the network
        if dtype == "fp16":
            model.half()
        module = model.inference_module(net).eval()
        # A copy in channels_last (the module wraps a closure over its network, so copy the network).
        last = model.inference_module(copy.deepcopy(net).to(memory_format=torch.channels_last)).eval()
        compiling = args.compile and dtype == "fp16"
        for batch in batches:
            comp = _compile_reduce_overhead(module, batch, args) if compiling else float("nan")
            rows.append(_network_row(module, batch, args, f"NCHW {dtype}", comp, compiling))
            rows.append(_network_row(last, batch, args, f"channels_last {dtype}", comp, compiling))
        del model, net, module, last
        torch.cuda.empty_cache()
    return rows


def _input(batch: int, args: argparse.Namespace, layout: str) -> torch.Tensor:
    dtype = torch.float32 if layout.endswith("fp32") else torch.float16
    x = torch.rand(batch, 3, args.imgsz, args.imgsz, device="cuda", dtype=dtype)
    return x.contiguous(memory_format=torch.channels_last) if layout.startswith("channels_last") else x


def _compile_reduce_overhead(module: torch.nn.Module, batch: int, args: argparse.Namespace,
                             x: torch.Tensor | None = None) -> float:
    """Median ms of ``torch.compile(module, mode="reduce-overhead")`` on ``x`` (default: an NCHW
    fp16 batch)."""
    mark = getattr(torch.compiler, "cudagraph_mark_step_begin", lambda: None)
    torch._dynamo.reset()
    compiled = torch.compile(module, mode="reduce-overhead")
    x = _input(batch, args, "NCHW fp16") if x is None else x

    def call() -> Any:
        mark()  # a new step for compile's graph trees: the previous output is not kept
        return compiled(x)

    try:
        with torch.no_grad():
            t0 = time.perf_counter()
            call()
            torch.cuda.synchronize()
            log(f"compile(reduce-overhead) batch {batch}: first call {time.perf_counter() - t0:.1f} s")
            return median_ms(call, args.reps, args.warmup)
    finally:
        torch._dynamo.reset()


def _network_row(module: torch.nn.Module, batch: int, args: argparse.Namespace, layout: str,
                 comp_ms: float, compiling: bool) -> str:
    from libreyolo_cudagraph import GraphRunner

    x = _input(batch, args, layout)

    def graphed(fn: Callable[[torch.Tensor], Any], tag: str) -> tuple[float, bool]:
        runner = GraphRunner(fn, mode="on", name=f"net-b{batch}-{layout}-{tag}")
        ms = median_ms(lambda: runner(x), args.reps, args.warmup)
        same = _equal(runner(x), fn(x))
        runner.release()
        return ms, same

    nan = float("nan")
    saved = torch.backends.cudnn.benchmark
    with torch.no_grad():  # as tools/bench_infer_graphs.py: compile's graph trees and ours alike
        try:
            torch.backends.cudnn.benchmark = False
            eager = median_ms(lambda: module(x), args.reps, args.warmup)
            graph, _ = graphed(module, "heuristic")
            of_compile, of_bits = nan, False
            if compiling:
                torch._dynamo.reset()
                t0 = time.perf_counter()
                of_compile, of_bits = graphed(torch.compile(module, mode="default", dynamic=False), "compiled")
                log(f"our graph of compile(default) batch {batch} {layout}: {time.perf_counter() - t0:.1f} s")
                torch._dynamo.reset()
            torch.backends.cudnn.benchmark = True  # the choice is made once per shape, then cached
            tuned, bits = graphed(module, "autotuned")
        finally:
            torch.backends.cudnn.benchmark = saved
    return (f"| {batch} | {layout} | {eager:.3f} | {graph:.3f} | {tuned:.3f} | {'identical' if bits else 'DIFFER'} "
            f"| {comp_ms:.3f} | {of_compile:.3f} | {('identical' if of_bits else 'DIFFER') if compiling else '-'} "
            f"| {graph / comp_ms:.2f}x | {of_compile / comp_ms:.2f}x |")


def _equal(a: Any, b: Any) -> bool:
    """Bitwise equality of two outputs (tensors, or tuples/lists/dicts of them)."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and bool(torch.equal(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_equal(u, v) for u, v in zip(a, b))
    return bool(a == b)


# --------------------------------------------------------------------------- report
def report(results: dict[str, dict[str, Any]], net_rows: list[str], notes: list[str],
           args: argparse.Namespace, interleaved: list[str]) -> list[str]:
    gpu = torch.cuda.get_device_name(0)
    photos = args.set == "photos"
    folder_kind = "photographs: 720p, 1080p and portrait 1080x1920" if photos else "synthetic 1280x720"
    video_kind = "1080p30 (a pan over a photograph)" if photos else "720p30 (synthetic)"
    import PIL

    lines = [f"## Predict end to end ({datetime.date.today()}, {gpu}, torch {torch.__version__}, "
             f"Pillow {PIL.__version__})", "",
             f"YOLOv9-{args.size} random weights, imgsz {args.imgsz}, conf {args.conf}; image: batch 1, median of "
             f"{args.reps}; folder: {args.images} JPEGs ({folder_kind}) at batch {args.batch}; video: {args.video_s} s "
             f"{video_kind} at batch {args.batch}.", "",
             "| arm | image ms | folder img/s | video frames/s | peak allocated MiB | peak reserved MiB "
             "| graph pool MiB |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for arm, r in results.items():
        lines.append(f"| {arm} | {fmt(r.get('image_ms'))} | {fmt(r.get('folder_per_s'), '.0f')} | "
                     f"{fmt(r.get('video_per_s'), '.0f')} | {fmt(r.get('peak_mib'), '.0f')} | "
                     f"{fmt(r.get('reserved_mib'), '.0f')} | {fmt(r.get('pool_mib'), '.0f')} |")
    lines += ["", "Per-phase ms per image (decode runs on the prefetch thread, overlapping the GPU):", "",
              "| arm | scenario | decode | preprocess | network | postprocess | detections per image |",
              "|---|---|---:|---:|---:|---:|---:|"]
    for arm, r in results.items():
        for scenario in ("image", "folder", "video"):
            ph = r.get(f"{scenario}_phases")
            if ph:
                lines.append(f"| {arm} | {scenario} | " + " | ".join(fmt(ph.get(k), ".3f") for k in PHASES)
                             + f" | {fmt(ph.get('dets'), '.0f')} |")
    lines += ["", "Ratios (speed, higher is better for ours):", ""]
    base, peer = results.get("eager", {}), results.get("ultralytics", {})
    for arm, r in results.items():
        if arm.startswith("ultralytics"):
            continue
        parts = []
        for key, higher in (("image_ms", False), ("folder_per_s", True), ("video_per_s", True)):
            for ref_name, ref in (("eager", base), ("ultralytics", peer)):
                if arm == ref_name or not r.get(key) or not ref.get(key):
                    continue
                ratio = r[key] / ref[key] if higher else ref[key] / r[key]
                parts.append(f"{key.split('_')[0]} {ratio:.2f}x vs {ref_name}")
        lines.append(f"- {arm}: " + (", ".join(parts) or "-"))
    lines += interleaved
    lines += ["", "Network only (fused; CUDA events, medians):", "", *net_rows]
    if notes:
        lines += ["", *[f"- {n}" for n in notes]]
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--set", choices=("photos", "synthetic"), default="photos",
                   help="inputs: crops of tools/photos/ (default) or synthetic scenes")
    p.add_argument("--size", default="t")
    p.add_argument("--imgsz", type=int, default=640)
    p.add_argument("--conf", type=float, default=0.25)
    p.add_argument("--busy-scores", action="store_true",
                   help="keep our random class scores (~1,900 detections per image) instead of the prior")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--images", type=int, default=1000)
    p.add_argument("--video-s", type=int, default=30)
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--settle-s", type=float, default=30.0,
                   help="seconds of eager forwards before any arm, so no arm meets a cold machine (0: none)")
    p.add_argument("--arms", default="eager,eager-unfused,graph,half+fuse+graph,graph-cpu,half+fuse+graph-cpu,ultralytics")
    p.add_argument("--scenarios", default="image,folder,video",
                   help="which of image (batch 1, and the interleaved rounds), folder and video to run: a short "
                        "GPU call can measure one goal (e.g. video)")
    p.add_argument("--interleave-rounds", type=int, default=8,
                   help="rounds of the one-image scenario with the arms taking turns in one process (0: skip)")
    p.add_argument("--interleave-calls", type=int, default=10, help="calls of each arm per interleaved round")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--net-dtypes", default="fp16,fp32", help="network-only table: dtypes (fp16,fp32)")
    p.add_argument("--net-batches", default="", help="network-only table: batches (default: 1 and --batch)")
    p.add_argument("--data-dir", type=Path, default=Path("/tmp/bench-predict-data"))
    p.add_argument("--out", type=Path, default=None)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("bench_predict.py needs a CUDA GPU")
    notes: list[str] = []
    args.data_dir = args.data_dir / args.set  # photos and synthetic files never mix
    log(f"writing data into {args.data_dir}")
    image = args.data_dir / "one.jpg"
    args.data_dir.mkdir(parents=True, exist_ok=True)
    if not image.exists():
        Image.fromarray(one_image(args.set)).save(image, quality=90)
    scenarios = set(filter(None, args.scenarios.split(",")))
    if not scenarios <= {"image", "folder", "video"}:
        sys.exit(f"--scenarios {args.scenarios!r}: choose from image, folder, video")
    args.image_reps = args.reps if "image" in scenarios else 0
    folder: Path | None = None
    if "folder" in scenarios:
        folder = args.data_dir / f"folder{args.images}"
        write_images(folder, args.images, args.set)
    else:
        notes.append("folder scenario not asked for (--scenarios)")
    video_file = args.data_dir / f"video{args.video_s}s.mp4"
    why = write_video(video_file, args.video_s, kind=args.set) if "video" in scenarios else "not asked for (--scenarios)"
    video = video_file if why is None else None
    if why is None:
        from libreyolo_models.errors import SourceError
        from libreyolo_models.predict.video import require_av

        try:  # our video source reads through PyAV (the video extra): say so once, not once per arm
            require_av(str(video_file))
        except SourceError as err:
            why, video = str(err), None
    if why is not None:
        notes.append(f"video scenario skipped: {why}")
    from libreyolo_models.predict.gpu_jpeg import decoder_name, resolve_gpu_decode

    on_gpu = resolve_gpu_decode("auto", torch.device("cuda"))
    notes.append(f"inputs: {args.set}; JPEGs decode "
                 f"{f'on the GPU with {decoder_name()}' if on_gpu else 'on the CPU (no device decoder loads)'} in "
                 "the arms without a suffix (gpu_decode left at its default), on the CPU in the -cpu arms "
                 "(gpu_decode=False); the video's frames reach the GPU as planes and turn RGB there, the default "
                 "install's path, in every arm (gpu_decode left at its default)")
    notes.append(settle_machine(args.settle_s, args.size, args.imgsz))
    log(notes[-1])
    arms = [a for a in args.arms.split(",") if a]
    log("interleaved one-image scenario")
    interleaved = interleaved_image(arms, args, image) if "image" in scenarios else []
    log("\n".join(interleaved))
    results: dict[str, dict[str, Any]] = {}
    for arm in arms:
        key = arm if arm not in results else f"{arm} (again)"  # an arm named twice runs twice: the spread
        log(f"arm {key}")
        if arm == "ultralytics":
            from peer_ultralytics import run_peer

            peer = run_peer("predict", timeout_s=420, model=f"yolov9{args.size}.yaml",
                            source=image if args.image_reps else None, folder=folder,
                            video=video, imgsz=args.imgsz, batch=args.batch, reps=args.reps, warmup=args.warmup,
                            conf=args.conf, device="0")
            if "skipped" in peer:
                notes.append(f"ultralytics skipped: {peer['skipped']}")
            else:
                results[key] = peer
        elif arm in ARMS:
            try:
                results[key] = run_ours(arm, args, image, folder, video)
                if "video_error" in results[key]:
                    notes.append(f"{arm}: video scenario failed: {results[key]['video_error']}")
                if "boxes_vs_eager" in results[key]:
                    notes.append(f"{arm}: the batch-1 image's boxes (conf 0) against the same options "
                                 f"uncaptured: {results[key]['boxes_vs_eager']}")
            except Exception as err:  # noqa: BLE001 - one arm's failure is reported, the others still run
                notes.append(f"{arm} failed: {type(err).__name__}: {str(err)[:300]}")
        else:
            sys.exit(f"unknown arm {arm!r}; known: {', '.join([*ARMS, 'ultralytics'])}")
        if args.out is not None:  # a partial report after every arm: a timeout keeps what finished
            emit_report(report(results, [], [*notes, "partial: network-only rows not run yet"], args, interleaved),
                        args.out)
    net_rows = network_only(args)
    emit_report(report(results, net_rows, notes, args, interleaved), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
