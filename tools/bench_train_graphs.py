#!/usr/bin/env python
"""Training benchmark: eager vs graphed full train step under AMP, one run.

A full step is: zero_grad, forward (eager, or GraphedTraining replaying the captured forward and
backward) under fp16 autocast with cache_enabled=False, eager loss, GradScaler-scaled backward,
optimizer step (SGD, momentum, weight decay) and scaler update. Both arms start from the same
weights and see the same batch. Reports the median step time (CUDA events around each
synchronized step, after warmup; the graphed arm captures during warmup), the speedup, the
capture time and whether the two arms' losses were bit-identical. Markdown to stdout, progress
to stderr, optionally to ``--out``.

    python tools/bench_train_graphs.py --out bench-train.md
    python tools/bench_train_graphs.py --extra mypkg.bench:yolo9t_train

``--extra module:factory`` names ``factory(device) -> (name, module, inputs, loss_fn)`` where
``inputs`` is a tuple of tensors on ``device`` and ``loss_fn(outputs, inputs)`` returns the loss
(close over targets). The factory is called once per arm and must build the same model each time
(seed it): a loss that runs network work of its own (a split-capture family's eager head) then
closes over its own arm's network. Needs torch (and torchvision for the built-in resnet18 row).
"""

from __future__ import annotations

import argparse
import copy
import datetime
import functools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from factories import TrainCase, load_factory
from report import emit_report, log
from torch import nn

from libreyolo_cudagraph import GraphedTraining, bitwise_equal

Case = TrainCase


def resnet18_case(device: torch.device, batch: int, imgsz: int) -> Case:
    try:
        import torchvision
    except ImportError:
        sys.exit("the resnet18 row needs torchvision; install it, or pass --no-resnet18 with --extra")
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).to(device)
    x = torch.rand(batch, 3, imgsz, imgsz, device=device)
    labels = torch.randint(0, 1000, (batch,), device=device)

    def loss_fn(out: torch.Tensor, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return nn.functional.cross_entropy(out.float(), labels)

    return "resnet18", model, (x,), loss_fn


def extra_case(spec: str, device: torch.device) -> Case:
    name, model, inputs, loss_fn = load_factory(spec, "(name, module, inputs, loss_fn)")(device)
    if not isinstance(model, nn.Module) or not callable(loss_fn):
        sys.exit(f"--extra {spec!r}: returned ({type(model).__name__}, {type(loss_fn).__name__}) where "
                 "(nn.Module, loss_fn) belong")
    return str(name), model.to(device), tuple(inputs), loss_fn


def run_arm(
    model: nn.Module, call: Callable[..., Any], case: Case, args: argparse.Namespace
) -> tuple[float, torch.Tensor]:
    _, _, inputs, loss_fn = case
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    scaler = torch.amp.GradScaler("cuda")
    losses: list[torch.Tensor] = []

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16, cache_enabled=False):
            loss = loss_fn(call(*inputs), inputs)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.detach().clone())

    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.steps):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times), torch.stack(losses)


def bench_case(case: Case, args: argparse.Namespace, rebuild: Callable[[], Case] | None = None) -> str:
    """One row. ``rebuild`` makes the graphed arm's case afresh (else the module is deep-copied)."""
    name, model, inputs, _ = case
    graphed_case = rebuild() if rebuild is not None else (name, copy.deepcopy(model), inputs, case[3])
    graphed_model = graphed_case[1]
    eager_ms, eager_losses = run_arm(model, model, case, args)
    helper = GraphedTraining(graphed_model)
    graphed_ms, graphed_losses = run_arm(graphed_model, helper, graphed_case, args)
    info = helper.info()
    if info.latched or not info.graphs:
        log(f"    WARNING: {name} did not run graphed: {info.latched or dict(info.fallbacks)}")
    capture = f"{info.graphs[0].capture_ms:.0f}" if info.graphs else "-"
    shape = "x".join(str(s) for s in inputs[0].shape)
    same = "yes" if bitwise_equal(graphed_losses, eager_losses) else "no"
    return f"| {name} | {shape} | {eager_ms:.2f} | {graphed_ms:.2f} | {eager_ms / graphed_ms:.2f}x | {capture} | {same} |"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--resnet18", action=argparse.BooleanOptionalAction, default=True, help="include the resnet18 row"
    )
    p.add_argument("--batch", type=int, default=16, help="resnet18 batch")
    p.add_argument("--imgsz", type=int, default=224, help="resnet18 image size")
    p.add_argument(
        "--extra",
        action="append",
        default=[],
        help="module:factory(device) -> (name, module, inputs, loss_fn)",
    )
    p.add_argument("--steps", type=int, default=30, help="timed steps per arm")
    p.add_argument(
        "--warmup", type=int, default=10, help="untimed steps per arm (the graphed arm captures at step 3)"
    )
    p.add_argument(
        "--deterministic",
        action="store_true",
        help="cudnn.deterministic=True (makes 'losses bitwise' meaningful)",
    )
    p.add_argument("--out", type=Path, help="also write the markdown table here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("this benchmark needs a CUDA GPU")
    if args.warmup < 3:
        sys.exit(f"--warmup {args.warmup}: need at least 3 so the graphed arm captures before timing")
    device = torch.device("cuda")
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = args.deterministic
    cases: list[tuple[Case, Callable[[], Case] | None]] = []
    if args.resnet18:
        cases.append((resnet18_case(device, args.batch, args.imgsz), None))
    for spec in args.extra:  # each arm builds its own model: the factory is called again for the graphed one
        cases.append((extra_case(spec, device), functools.partial(extra_case, spec, device)))
    props = torch.cuda.get_device_properties(0)
    lines = [
        f"Training benchmark, {datetime.date.today().isoformat()}: torch {torch.__version__}, CUDA {torch.version.cuda}, "
        f"{props.name}; full AMP step (fp16 autocast, GradScaler, SGD); median of {args.steps} synchronized steps "
        f"after {args.warmup} warmup; cudnn.deterministic={args.deterministic}.",
        "",
        "| model | input | eager step ms | graphed step ms | speedup | capture ms | losses bitwise |",
        "|---|---|---|---|---|---|---|",
    ]
    started = time.perf_counter()
    for case, rebuild in cases:
        log(f"[{time.perf_counter() - started:6.1f} s] {case[0]} ...")
        lines.append(bench_case(case, args, rebuild))
        log("    " + lines[-1])
        torch.cuda.empty_cache()
    lines += ["", f"Total wall time {time.perf_counter() - started:.0f} s."]
    emit_report(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
