#!/usr/bin/env python
"""Host time of the training step's optimizer phase: torch's clip and GradScaler against ours.

The optimizer phase (unscale, clip, fused step, scaler update, zero the gradients, EMA) runs
eagerly in every training step, graphed or not, and on a GPU the step is host-bound. This
measures its host time with YOLOv9-t's 675 parameter tensors made two elements each, on the CPU,
so the arithmetic costs next to nothing and what is left is the per-tensor work around it. Two
arms in one run, alternating step by step, the same ``FusedOptimizer`` (AdamW, two groups) and EMA in both:

- ``torch``: ``torch.amp.GradScaler`` and ``torch.nn.utils.clip_grad_norm_``;
- ``ours``: ``train.grad_tools.LeanGradScaler`` and ``train.grad_tools.clip_grad_norm`` (what the
  trainer runs; bit for bit the same results).

CPU foreach kernels loop over the tensors in C++ where CUDA launches a few multi-tensor kernels,
so the totals overstate a GPU step's; the difference between the arms is Python either way.

    python tools/probe_optimizer_host.py --steps 300
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import cast

import torch
from report import emit_report

PHASES = ("unscale", "clip", "step", "update", "zero", "ema")


class Arm:
    """One arm's parameters, optimizer, scaler, clip and EMA."""

    def __init__(self, arm: str, n: int) -> None:
        from libreyolo_models.train.ema import ModelEMA
        from libreyolo_models.train.fused_optim import FusedOptimizer
        from libreyolo_models.train.grad_tools import LeanGradScaler, clip_grad_norm

        torch.manual_seed(0)
        self.net = torch.nn.Module()
        for i in range(n):
            self.net.register_parameter(f"p{i}", torch.nn.Parameter(torch.randn(2)))
        self.params = list(self.net.parameters())
        self.grads = [torch.randn(2) for _ in self.params]
        self.opt = FusedOptimizer("AdamW", [{"params": self.params[: n // 3], "weight_decay": 5e-4},
                                            {"params": self.params[n // 3:], "weight_decay": 0.0}], lr=1e-3)
        self.scaler = (LeanGradScaler if arm == "ours" else torch.amp.GradScaler)("cpu")
        self.clip = clip_grad_norm if arm == "ours" else torch.nn.utils.clip_grad_norm_
        self.ema = ModelEMA(self.net)
        self.times: dict[str, list[float]] = {p: [] for p in PHASES}

    def step(self, keep: bool) -> None:
        # GradScaler reads only param_groups and the fused-step attributes: FusedOptimizer has them
        # (train.step passes it the same way).
        opt = cast(torch.optim.Optimizer, self.opt)
        self.scaler.scale(torch.ones(()))
        for p, g in zip(self.params, self.grads):
            p.grad = g.clone()
        marks = [time.perf_counter()]
        self.scaler.unscale_(opt)
        marks.append(time.perf_counter())
        self.clip(self.params, 10.0)
        marks.append(time.perf_counter())
        self.scaler.step(opt)
        marks.append(time.perf_counter())
        self.scaler.update()
        marks.append(time.perf_counter())
        self.opt.zero_grad(set_to_none=True)
        marks.append(time.perf_counter())
        self.ema.update(self.net)
        marks.append(time.perf_counter())
        if keep:
            for k, phase in enumerate(PHASES):
                self.times[phase].append((marks[k + 1] - marks[k]) * 1e3)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--tensors", type=int, default=675, help="parameter tensors (YOLOv9-t has 675)")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    arms = {arm: Arm(arm, args.tensors) for arm in ("torch", "ours")}
    for it in range(args.steps + 50):  # the arms alternate step by step: drift hits both alike
        for arm in arms.values():
            arm.step(keep=it >= 50)
    medians = {name: {p: statistics.median(v) for p, v in arm.times.items()} for name, arm in arms.items()}
    lines = [f"# Optimizer-phase host time, {args.tensors} two-element tensors, CPU, 1 thread "
             f"(torch {torch.__version__}; medians of {args.steps} steps, ms)", "",
             "| phase | torch's clip and GradScaler | ours | saved |", "|---|---:|---:|---:|"]
    for phase in PHASES:
        a, b = medians["torch"][phase], medians["ours"][phase]
        lines.append(f"| {phase} | {a:.3f} | {b:.3f} | {a - b:+.3f} |")
    ta, tb = sum(medians["torch"].values()), sum(medians["ours"].values())
    lines.append(f"| all | {ta:.3f} | {tb:.3f} | {ta - tb:+.3f} |")
    emit_report(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
