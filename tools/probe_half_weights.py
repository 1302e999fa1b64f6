"""What the fp16 weight copies save in an eager AMP training step, per family that declares them.

``train.half_weights`` removes autocast's per-forward weight casts and autograd's gradient casts
back (two operations per convolution or linear weight); an eager step is bound by the host's
launching, so the step should shorten by about those operations' host time. For each family
(small size), this times eager AMP steps (forward, a sum-of-squares loss, backward, SGD step;
fp16 autocast with its cache off, as the trainer runs it) with the copies and with the casts,
alternating, median of ``--steps`` synchronised steps each, and prints the ratio.

    PYTHONPATH=... python tools/probe_half_weights.py --batch 32 --out probe-half-weights.md
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import statistics
import time
from pathlib import Path

import torch
from report import emit_report, log

from libreyolo_models import LibreYOLO
from libreyolo_models.contract.family import has_training_head
from libreyolo_models.tensor_trees import tensor_leaves
from libreyolo_models.train.half_weights import HalfWeights

FAMILIES = {"yolo9": ("t", 640), "yolox": ("s", 640), "segformer": ("b0", 512), "resnet": ("50", 224),
            "efficientnetv2": ("b0", 224), "convnext": ("tiny", 224), "mobilenetv4": ("small", 224)}


def step_ms(family: str, size: str, imgsz: int, batch: int, steps: int, rounds: int,
            device: torch.device) -> tuple[float, float]:
    """Median ms of an eager AMP step with the copies and with the casts."""
    torch.manual_seed(0)
    model = LibreYOLO(family=family, size=size, nc=80, imgsz=imgsz)
    net = model.net.to(device).train().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=1e-4, momentum=0.9)
    dtype = torch.float16 if device.type == "cuda" else torch.bfloat16  # CPU: a dry run under its autocast
    copies = HalfWeights(net, dtype)
    x = torch.rand(batch, 3, imgsz, imgsz, device=device).contiguous(memory_format=torch.channels_last)
    targets = model.family.sample_targets(batch, imgsz, torch.Generator().manual_seed(0)) \
        if has_training_head(model.family) else None

    def one(half: bool) -> None:
        with torch.autocast(device.type, dtype=dtype, cache_enabled=False):
            with copies.installed() if half else contextlib.nullcontext():
                out = model.family.training_forward(net, x)
                if targets is not None:
                    out = model.family.training_head(net, out, targets)
            loss = torch.stack([t.float().square().mean() for t in tensor_leaves(out) if t.is_floating_point()]).sum()
        loss.backward()
        if half:
            copies.grads_to_masters()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if half:
            copies.refresh()

    times: dict[bool, list[float]] = {True: [], False: []}
    for half in (True, False):
        for _ in range(5):
            one(half)
    for _ in range(rounds):
        for half in (True, False):
            per = []
            for _ in range(steps):
                t0 = time.perf_counter()
                one(half)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                per.append((time.perf_counter() - t0) * 1e3)
            times[half].append(statistics.median(per))
    return statistics.median(times[True]), statistics.median(times[False])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--device", default="cuda:0", help="cpu: a dry run of the script (bf16 autocast there)")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    device = torch.device(args.device)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU, a dry run"
    lines = [f"# Eager AMP step, fp16 weight copies vs per-forward casts ({datetime.date.today()}, "
             f"torch {torch.__version__}, {where}), batch {args.batch}, channels_last", "",
             "| family | size | imgsz | copies ms | casts ms | casts / copies |", "|---|---|---:|---:|---:|---:|"]
    for family in args.families.split(","):
        size, imgsz = FAMILIES[family]
        copies, casts = step_ms(family, size, imgsz, args.batch, args.steps, args.rounds, device)
        lines.append(f"| {family} | {size} | {imgsz} | {copies:.2f} | {casts:.2f} | {casts / copies:.2f}x |")
        log(lines[-1])
        if device.type == "cuda":
            torch.cuda.empty_cache()
    emit_report(lines, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
