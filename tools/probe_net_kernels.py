"""Where the fused fp16 network's graph replay goes, against ``torch.compile``'s, and what a fused
convolution epilogue buys (issue 20's network-only goal).

Prints, for YOLOv9-t fused, fp16, channels_last, 640 px, batch 1 (and ``--batches``):

- the kernels one eager call launches (counted and timed by the profiler, grouped by kind), ours
  and ``torch.compile(mode="default")``'s: how many, and how much GPU time they add up to;
- the eager and graph replay times of variants of the folded Conv unit, each graph against its own
  eager call (``bits``) and each eager output against the shipped one's: the shipped form (aten's
  convolution with bias, then SiLU), a bias-free convolution followed by one bias + SiLU kernel
  (torch's jiterator, or Triton), and two lower bounds that skip work (timing only);
- ``torch.compile(mode="reduce-overhead")`` of the same network in the same run.

    PYTHONPATH=... python tools/probe_net_kernels.py --batches 1,32
"""

from __future__ import annotations

import argparse
import collections
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from bench_predict import _compile_reduce_overhead, _equal, fresh_model, median_ms


def log(msg: str) -> None:
    print(f"[probe_net_kernels] {msg}", flush=True)


def kernel_kind(name: str) -> str:
    """A short family name for a CUDA kernel (its own names are templates a screen long)."""
    low = name.lower()
    for pattern, kind in (("bias_silu", "epilogue (probe)"), ("triton", "triton (generated)"), ("conv|xmma|implicit_gemm|sm90_|cutlass|cudnn|gemm",
                                                                   "convolution"),
                          ("cat|concat", "cat"), ("silu", "silu"), ("sigmoid", "sigmoid"), ("softmax", "softmax"),
                          ("pool", "pool"), ("upsample|nearest", "upsample"), ("copy|contiguous", "copy"),
                          ("reduce|sum", "reduce"), ("elementwise|vectorized|unrolled", "elementwise (add/mul/...)")):
        if re.search(pattern, low):
            return kind
    return "other"


def kernel_table(fn: Callable[[], Any], tag: str) -> list[str]:
    """Profile one eager call: kernel count and GPU microseconds per kind."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    counts: collections.Counter[str] = collections.Counter()
    micros: collections.Counter[str] = collections.Counter()
    for evt in prof.events():
        if evt.device_type != torch.autograd.DeviceType.CUDA:
            continue
        kind = kernel_kind(evt.name)
        counts[kind] += 1
        micros[kind] += evt.device_time_total if hasattr(evt, "device_time_total") else evt.cuda_time_total
    lines = [f"#### {tag}: {sum(counts.values())} kernels, {sum(micros.values()) / 1000:.3f} ms of GPU time", "",
             "| kind | kernels | GPU ms |", "|---|---:|---:|"]
    for kind, n in counts.most_common():
        lines.append(f"| {kind} | {n} | {micros[kind] / 1000:.3f} |")
    return lines + [""]


# --------------------------------------------------------------------------- variants of the unit
_JIT_BIAS_SILU = """
template <typename T> T bias_silu(T y, T bias) {
  float v = static_cast<float>(static_cast<T>(static_cast<float>(y) + static_cast<float>(bias)));
  return static_cast<T>(v / (1.0f + expf(-v)));
}
"""


def _jiterator_bias_silu() -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Bias + SiLU as one kernel compiled by torch's jiterator (NVRTC), launched like aten's."""
    fn = torch.cuda.jiterator._create_jit_fn(_JIT_BIAS_SILU)
    return lambda y, bias: fn(y, bias.view(1, -1, 1, 1))


def _triton_bias_silu() -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Bias + SiLU as one Triton kernel, in place on the convolution's output."""
    import triton
    import triton.language as tl

    # Triton reads a kernel's annotations to specialise it: only BLOCK carries one (constexpr),
    # the others stay bare, hence the ignore.
    @triton.jit
    def bias_silu(y_ptr, b_ptr, n, channels, inner, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]  # noqa: N803
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        c = (offs // inner) % channels
        v = tl.load(y_ptr + offs, mask=mask).to(tl.float32) + tl.load(b_ptr + c, mask=mask).to(tl.float32)
        tl.store(y_ptr + offs, (v / (1.0 + tl.exp(-v))).to(y_ptr.dtype.element_ty), mask=mask)

    def run(y: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        inner = 1 if not y.is_contiguous() else y.shape[2] * y.shape[3]  # channels_last: channel fastest
        bias_silu[(triton.cdiv(y.numel(), 1024),)](y, bias, y.numel(), y.shape[1], inner, BLOCK=1024, num_warps=4)
        return y

    return run


@contextmanager
def unit_variant(name: str) -> Iterator[None]:
    """Swap the folded Conv unit's forward for one of the variants, for the duration."""
    from libreyolo_models.layers.conv import Conv, SiLU

    shipped = Conv.forward
    if name == "shipped (aten: conv with bias, SiLU)":
        yield
        return
    epilogue = {"jiterator epilogue (bias + SiLU)": _jiterator_bias_silu,
                "Triton epilogue (bias + SiLU)": _triton_bias_silu}.get(name, lambda: None)()

    def forward(self: Conv, x: torch.Tensor) -> torch.Tensor:
        if not self.folded:
            return shipped(self, x)
        conv = self.conv
        silu = isinstance(self.act, SiLU)
        if epilogue is not None and silu:
            assert conv.bias is not None, "a folded Conv carries the BatchNorm shift as its bias"
            y = F.conv2d(x, conv.weight, None, conv.stride, conv.padding, conv.dilation, conv.groups)
            return epilogue(y, conv.bias)
        bias = None if name == "bound: convolution only" else conv.bias
        y = F.conv2d(x, conv.weight, bias, conv.stride, conv.padding, conv.dilation, conv.groups)
        return y if name.startswith("bound") or not silu else F.silu(y, inplace=True)

    Conv.forward = forward  # type: ignore[method-assign]
    try:
        yield
    finally:
        Conv.forward = shipped  # type: ignore[method-assign]


VARIANTS = ("shipped (aten: conv with bias, SiLU)", "jiterator epilogue (bias + SiLU)", "Triton epilogue (bias + SiLU)",
            "bound: no SiLU", "bound: convolution only")


def _variant_row(module: torch.nn.Module, x: torch.Tensor, name: str, args: argparse.Namespace,
                 reference: Any) -> tuple[str, Any, list[str]]:
    """One unit form: its eager and graphed times, whether the graph replays its eager call, whether
    its output is the shipped form's (``reference``), and its kernel table."""
    from libreyolo_cudagraph import GraphRunner

    batch = x.shape[0]
    with unit_variant(name):
        t0 = time.perf_counter()
        module(x)
        torch.cuda.synchronize()
        first = time.perf_counter() - t0
        eager = median_ms(lambda: module(x), args.reps, args.warmup)
        runner = GraphRunner(module, mode="on", name=f"probe-{name}-b{batch}")
        graph = median_ms(lambda: runner(x), args.reps, args.warmup)
        out = module(x)
        same = _equal(runner(x), out)
        runner.release()
        reference = out if reference is None else reference
        log(f"b{batch} {name}: first call {first:.2f} s, eager {eager:.3f}, graph {graph:.3f} ms")
        table = kernel_table(lambda: module(x), f"b{batch} ours, {name}") if args.profile else []
    row = (f"| {name} | {eager:.3f} | {graph:.3f} | {'identical' if same else 'DIFFER'} "
           f"| {'yes' if _equal(out, reference) else 'no'} |")
    return row, reference, table


def _compiled_rows(module: torch.nn.Module, x: torch.Tensor, args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """Our graph of ``torch.compile(mode="default")`` and compile's own ``reduce-overhead``."""
    from libreyolo_cudagraph import GraphRunner

    batch = x.shape[0]
    torch._dynamo.reset()
    compiled = torch.compile(module, mode="default", dynamic=False)
    t0 = time.perf_counter()
    compiled(x)
    log(f"compile(default) b{batch}: first call {time.perf_counter() - t0:.1f} s")
    table = kernel_table(lambda: compiled(x), f"b{batch} torch.compile(default)") if args.profile else []
    runner = GraphRunner(compiled, mode="on", name=f"probe-compiled-b{batch}")
    rows = [f"| our graph of compile(default) | - | {median_ms(lambda: runner(x), args.reps, args.warmup):.3f} "
            "| - | - |"]
    runner.release()
    reduce_ms = _compile_reduce_overhead(module, batch, args, x)
    rows.append(f"| torch.compile(reduce-overhead) | - | {reduce_ms:.3f} | - | - |")
    return rows, table


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", default="t")
    p.add_argument("--imgsz", type=int, default=640)
    p.add_argument("--batches", default="1")
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--profile", action=argparse.BooleanOptionalAction, default=True)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("probe_net_kernels.py needs a CUDA GPU")

    model = fresh_model(args.size, args.imgsz).to(0).half()
    net = model.fused_net(channels_last=True)
    module = model.inference_module(net).eval()
    lines = [f"## Fused fp16 channels_last YOLOv9-{args.size}, {args.imgsz} px ({torch.cuda.get_device_name(0)}, "
             f"torch {torch.__version__})", ""]
    for batch in (int(b) for b in args.batches.split(",")):
        x = torch.rand(batch, 3, args.imgsz, args.imgsz, device="cuda", dtype=torch.float16)
        x = x.contiguous(memory_format=torch.channels_last)
        rows = [f"### batch {batch}", "", "| unit form | eager ms | graph ms | bits (graph vs its eager call) "
                "| eager output = the shipped form's |", "|---|---:|---:|---|---|"]
        reference = None
        with torch.no_grad():
            for name in VARIANTS:
                row, reference, table = _variant_row(module, x, name, args, reference)
                rows.append(row)
                lines += table
            if args.compile:
                more, table = _compiled_rows(module, x, args)
                rows += more
                lines += table
        lines += rows + [""]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
