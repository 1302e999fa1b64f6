#!/usr/bin/env python
"""What an eager training step's host time is made of, op by op, and what cheaper forms save (GPU).

An eager YOLOv9 step is launch-bound: the GPU waits for the host to issue ~2,300 kernels. This
probe answers two questions in one process, so the answers are comparable:

1. **Per-operation host cost** at a tiny shape (batch 1, 20 px, so the GPU never makes the host
   wait): how many microseconds the host spends issuing one convolution (3x3, 1x1), the same 1x1
   as a matrix multiply over the channels_last layout, batch norm in training mode, SiLU and a
   weight cast, forward and forward + backward; batch norm also through aten's own kernels
   instead of cuDNN's.
2. **The bare step with each cheaper form** (YOLOv9 ``--size``, ``--batch``, ``--imgsz``, AMP with
   the trainer's cache-off autocast, channels_last, cuDNN autotune, fused SGD, no data pipeline),
   patched in turn on the ``Conv`` unit: 1x1 convolutions as matrix multiplies (``mm1x1``), the
   weights cast to fp16 in one multi-tensor op per step instead of one cast per convolution
   (``cast1``), the unit's conv / BN / activation called as functions instead of three submodule
   calls (``func``), and all three. Each variant's step time is the median of ``--steps``
   synchronised steps; the baseline runs first and last (its drift bounds what a difference means).

    python tools/probe_step_variants.py --batch 32 --out probe-step-variants.md
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from report import emit_report, log
from torch import Tensor, nn

# ---------------------------------------------------------------- part 1: one operation at a time


def host_and_gpu_us(fn: Callable[[], Any], calls: int = 300) -> tuple[float, float]:
    """Host microseconds to issue one call (no sync inside the loop) and GPU microseconds per call."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - t0) / calls * 1e6
    end.record()
    torch.cuda.synchronize()
    return host, start.elapsed_time(end) * 1e3 / calls


def matmul_1x1(x: Tensor, weight: Tensor) -> Tensor:
    """A 1x1, stride-1, ungrouped convolution of a channels_last ``x`` as one matrix multiply:
    ``[N, H, W, C] @ [C, O]``; the result is channels_last again, with no copies either way."""
    y = torch.matmul(x.permute(0, 2, 3, 1), weight.view(weight.shape[0], -1).t())
    return y.permute(0, 3, 1, 2)


def op_rows() -> list[str]:
    dev = torch.device("cuda")
    cl = torch.channels_last
    c = 64
    x = torch.rand(1, c, 20, 20, device=dev, dtype=torch.float16).contiguous(memory_format=cl)
    xg = x.clone().requires_grad_(True)
    w3 = torch.rand(c, c, 3, 3, device=dev).contiguous(memory_format=cl)
    w1 = torch.rand(c, c, 1, 1, device=dev).contiguous(memory_format=cl)
    w1h, w3h = w1.half(), w3.half()
    w1g = w1h.clone().requires_grad_(True)
    w3g = w3h.clone().requires_grad_(True)
    bn_w = torch.ones(c, device=dev, requires_grad=True)
    bn_b = torch.zeros(c, device=dev, requires_grad=True)
    rm, rv = torch.zeros(c, device=dev), torch.ones(c, device=dev)
    weights = [torch.rand(c, c, 3, 3, device=dev).contiguous(memory_format=cl) for _ in range(221)]
    halves = [torch.empty_like(w, dtype=torch.float16) for w in weights]

    def backward(y: Tensor) -> None:
        y.backward(torch.ones_like(y))

    cases: list[tuple[str, Callable[[], Any]]] = [
        ("conv 3x3 forward (cuDNN)", lambda: F.conv2d(x, w3h, None, 1, 1)),
        ("conv 1x1 forward (cuDNN)", lambda: F.conv2d(x, w1h)),
        ("1x1 as matmul forward (cuBLAS)", lambda: matmul_1x1(x, w1h)),
        ("conv 3x3 forward + backward", lambda: backward(F.conv2d(xg, w3g, None, 1, 1))),
        ("conv 1x1 forward + backward", lambda: backward(F.conv2d(xg, w1g))),
        ("1x1 as matmul forward + backward", lambda: backward(matmul_1x1(xg, w1g))),
        ("batch norm, training, forward", lambda: F.batch_norm(x, rm, rv, bn_w, bn_b, True, 0.03, 1e-3)),
        ("batch norm forward + backward",
         lambda: backward(F.batch_norm(xg, rm, rv, bn_w, bn_b, True, 0.03, 1e-3))),
        ("batch norm, training, forward, aten's own kernels (not cuDNN)",
         lambda: torch.native_batch_norm(x, bn_w, bn_b, rm, rv, True, 0.03, 1e-3)[0]),
        ("the same, forward + backward",
         lambda: backward(torch.native_batch_norm(xg, bn_w, bn_b, rm, rv, True, 0.03, 1e-3)[0])),
        ("SiLU forward", lambda: F.silu(x)),
        ("weight cast fp32 -> fp16 (one)", lambda: w3.to(torch.float16)),
        ("221 weight casts, one _foreach_copy_", lambda: torch._foreach_copy_(halves, weights)),
        ("nn.Module call overhead (Identity)", lambda: _IDENTITY(x)),
    ]
    rows = ["## One operation at a time (batch 1, 64 channels, 20 px, fp16 channels_last)", "",
            "| operation | host us per call | GPU us per call |", "|---|---:|---:|"]
    for name, fn in cases:
        host, gpu = host_and_gpu_us(fn)
        rows.append(f"| {name} | {host:.1f} | {gpu:.1f} |")
        xg.grad = w1g.grad = w3g.grad = bn_w.grad = bn_b.grad = None
    return rows + [""]


_IDENTITY = nn.Identity()

# ---------------------------------------------------------------- part 2: the bare step, patched


class _CastAll(torch.autograd.Function):
    """fp16 copies of many fp32 weights in one multi-tensor copy; gradients back the same way.

    The same values as autocast's per-weight cast (an fp32 -> fp16 round, and fp16 -> fp32 on the
    way back, both exact functions of their input), in two launches instead of one per weight."""

    @staticmethod
    def forward(ctx: Any, *weights: Tensor) -> tuple[Tensor, ...]:
        halves = [torch.empty_like(w, dtype=torch.float16) for w in weights]
        torch._foreach_copy_(halves, list(weights))
        return tuple(halves)

    @staticmethod
    def backward(ctx: Any, *grads: Tensor | None) -> tuple[Tensor | None, ...]:
        present = [g for g in grads if g is not None]
        fulls = [torch.empty_like(g, dtype=torch.float32) for g in present]
        if present:
            torch._foreach_copy_(fulls, present)
        it = iter(fulls)
        return tuple(None if g is None else next(it) for g in grads)


@contextlib.contextmanager
def patched_units(variant: str, net: nn.Module) -> Iterator[Callable[[], None]]:
    """Patch ``Conv.forward`` for ``variant``; yields the per-step hook (casts, for ``cast1``)."""
    from libreyolo_models.layers import conv as conv_mod

    units = [m for m in net.modules() if isinstance(m, conv_mod.Conv)]
    original = conv_mod.Conv.forward
    use_mm = variant in ("mm1x1", "all")
    use_cast = variant in ("cast1", "all")
    use_func = variant in ("func", "all")
    halves: dict[int, Tensor] = {}

    def weight_of(unit: Any) -> Tensor:
        return halves.get(id(unit), unit.conv.weight)

    def forward(self: Any, x: Tensor) -> Tensor:
        conv = self.conv
        w = weight_of(self)
        if (use_mm and conv.kernel_size == (1, 1) and conv.stride == (1, 1) and conv.groups == 1
                and conv.padding == (0, 0) and x.is_contiguous(memory_format=torch.channels_last)):
            y = matmul_1x1(x, w)
        elif use_func or use_cast:
            y = F.conv2d(x, w, None, conv.stride, conv.padding, conv.dilation, conv.groups)
        else:
            y = conv(x)
        if use_func:
            bn = self.bn
            torch.autograd.graph.increment_version(bn.num_batches_tracked)
            y = F.batch_norm(y, bn.running_mean, bn.running_var, bn.weight, bn.bias, True, bn.momentum, bn.eps)
            return F.silu(y) if isinstance(self.act, conv_mod.SiLU) else y
        return self.act(self.bn(y))

    def per_step() -> None:
        halves.clear()
        if use_cast:
            cast = _CastAll.apply(*(u.conv.weight for u in units))
            halves.update((id(u), h) for u, h in zip(units, cast, strict=True))

    if variant != "base":
        conv_mod.Conv.forward = forward  # type: ignore[method-assign]
    try:
        yield per_step
    finally:
        conv_mod.Conv.forward = original  # type: ignore[method-assign]
        halves.clear()


def step_rows(args: argparse.Namespace) -> list[str]:
    from probe_train_step import bare_step_inputs

    torch.manual_seed(0)
    family, net, images, targets, ctx = bare_step_inputs(args.size, args.batch, args.imgsz)
    params = list(net.parameters())
    opt = torch.optim.SGD(params, lr=1e-6, momentum=0.9, nesterov=True, fused=True)
    scaler = torch.amp.GradScaler("cuda")
    rows = [f"## The bare step, YOLOv9-{args.size}, batch {args.batch}, {args.imgsz} px "
            f"(medians of {args.steps} synchronised steps after 10)", "",
            "| variant | step ms | forward host ms | backward host ms | loss (first step) |", "|---|---:|---:|---:|---:|"]
    base = None
    for variant in args.variants.split(","):
        with patched_units(variant, net) as per_step:
            walls, fwd, bwd = [], [], []
            first_loss = float("nan")
            for it in range(args.steps + 10):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                with torch.autocast("cuda", dtype=torch.float16, cache_enabled=False):
                    per_step()
                    out = family.training_forward(net, images)
                    t1 = time.perf_counter()
                    loss = family.compute_loss(out, targets, ctx).total
                t2 = time.perf_counter()
                scaler.scale(loss).backward()
                t3 = time.perf_counter()
                scaler.unscale_(opt)
                torch.nn.utils.clip_grad_norm_(params, 10.0)
                scaler.step(opt)
                scaler.update()
                opt.zero_grad(set_to_none=True)
                torch.cuda.synchronize()
                if it == 0:
                    first_loss = float(loss)
                if it >= 10:
                    walls.append((time.perf_counter() - t0) * 1e3)
                    fwd.append((t1 - t0) * 1e3)
                    bwd.append((t3 - t2) * 1e3)
        wall = statistics.median(walls)
        base = base or wall
        log(f"{variant}: {wall:.1f} ms")
        rows.append(f"| {variant} | {wall:.1f} ({wall / base:.2f}x) | {statistics.median(fwd):.1f} | "
                    f"{statistics.median(bwd):.1f} | {first_loss:.5f} |")
    return rows + ["", "The weights move a little between variants (lr 1e-6), so first-step losses compare "
                   "only roughly; the step times are what the table is for.", ""]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="t")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--imgsz", type=int, default=640)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--variants", default="base,mm1x1,cast1,func,all,base")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("probe_step_variants needs a CUDA GPU")
    lines = [f"# Step variants probe ({datetime.date.today()}, torch {torch.__version__}, "
             f"{torch.cuda.get_device_name(0)})", ""]
    lines += op_rows()
    lines += step_rows(args)
    emit_report(lines, args.out)


if __name__ == "__main__":
    main()
