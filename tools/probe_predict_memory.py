#!/usr/bin/env python
"""Where predict's peak GPU memory comes from (GPU): each step of a batch, eager against graphed.

``bench_predict.py`` reports one peak per arm. This probe replays the predictor's steps for the
bench's sequence (a 1280x720 image at batch 1, then batches of 32 same-size 720p frames) and, per
step, the memory allocated before it and the peak during it (``torch.cuda.max_memory_allocated``
reset before each step), first batch of a shape (where a graph is captured) apart from the
batches after it. Two inputs per arm: the uint8 letterbox predict hands the network now (scaled
inside the call, so inside the graph) and the float input it used to hand it.

    python tools/probe_predict_memory.py --out probe-predict-memory.md
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch
from bench_predict import fresh_model
from report import emit_report, log

MIB = 2**20
STEPS = ("prepare", "network", "post-process", "to host")


def _frames(n: int, h: int, w: int, seed: int) -> list[torch.Tensor]:
    rng = np.random.default_rng(seed)
    return [torch.from_numpy(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).pin_memory() for _ in range(n)]


def probe(arm: str, scaled: bool, args: argparse.Namespace) -> list[list[str]]:
    """Rows ``[arm, input, batch, step, before MiB, peak MiB]`` for the sequence, and the arm's total."""
    from libreyolo_models.data.letterbox_images import letterbox_batch
    from libreyolo_models.devices import default_device
    from libreyolo_models.predict.predictor import Predictor
    from libreyolo_models.settings import PredictConfig

    facade = fresh_model(args.size, args.imgsz, prior_scores=True)
    model = facade.handle  # what predict runs on
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    cfg = PredictConfig(device=0, imgsz=args.imgsz, cuda_graph=arm == "graph", verbose=False)
    # device and image size resolved as predict's run_prediction does
    predictor = Predictor(model, cfg, device=default_device(cfg.device, model.device, model.runs_only_on),
                          imgsz=model.resolve_imgsz(cfg.imgsz))
    task, device = predictor.task, model.device
    label = "float" if scaled else "uint8"
    rows: list[list[str]] = []
    overall = 0.0
    for batch, calls in ((1, 3), (args.batch, 3)):
        frames = _frames(batch, 720, 1280, batch)
        peaks: dict[str, list[tuple[float, float]]] = {s: [] for s in STEPS}
        for _ in range(calls):
            torch.cuda.synchronize()
            recorded = []
            for step in STEPS:
                torch.cuda.synchronize()
                before = torch.cuda.memory_allocated() / MIB
                torch.cuda.reset_peak_memory_stats()
                if step == "prepare":
                    if scaled:
                        x, _ = letterbox_batch([f.to(device, non_blocking=True) for f in frames], args.imgsz,
                                               model.dtype)
                    else:
                        x, _ = task.prepare_batch(frames, args.imgsz, model.dtype, device)
                elif step == "network":
                    with torch.inference_mode():
                        out = predictor.forward(x)
                elif step == "post-process":
                    post = model.family.postprocess(out, predictor.options)
                else:
                    task.predictions_to_host(post)
                    del x, out, post
                torch.cuda.synchronize()
                recorded.append((before, torch.cuda.max_memory_allocated() / MIB))
            for step, value in zip(STEPS, recorded):
                peaks[step].append(value)
        for step in STEPS:
            first, later = peaks[step][0], max(peaks[step][1:], key=lambda v: v[1])
            overall = max(overall, first[1], later[1])
            rows.append([arm, label, str(batch), step, f"{first[0]:.0f}", f"{first[1]:.0f}",
                         f"{later[0]:.0f}", f"{later[1]:.0f}"])
    pool = sum(g["pool_bytes"] or 0 for g in facade.graph_info()["graphs"]) / MIB
    rows.append([arm, label, "all", "peak of the sequence; graph pools", "", f"{overall:.0f}", "",
                 f"pools {pool:.0f}"])
    facade.release_graphs()
    del facade, model, predictor
    torch.cuda.empty_cache()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="t")
    p.add_argument("--imgsz", type=int, default=640)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        log("needs a CUDA GPU")
        return 1
    rows = []
    for arm in ("eager", "graph"):
        for scaled in (False, True):
            rows += probe(arm, scaled, args)
    lines = [f"# Predict memory by step (YOLOv9-{args.size}, {args.imgsz} px, 720p frames; MiB allocated)", "",
             f"{torch.cuda.get_device_name()}, torch {torch.__version__}", "",
             "| arm | input | batch | step | first: before | first: peak | later: before | later: peak |",
             "|---|---|---:|---|---:|---:|---:|---:|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    emit_report(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
