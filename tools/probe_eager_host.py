"""Why eager predict's network phase moves between runs: our fused network against Ultralytics'
in one process, before and after our predict has run there (issue 20).

The eager batch-1 forward is bound by the host's launching (``docs/benchmarks.md``), and the two
networks dispatch the same number of operations (``tools/count_ops.py``: 475 each). Yet in
``bench_predict.py`` runs our network phase has read 0.9-1.7x Ultralytics'; there the peer runs in
a fresh child process and ours in the process that has run the other arms. This probe times both
raw forwards (fused, fp32 NCHW, batch 1, 640 px, under ``inference_mode``, one synchronised call
each, median of ``--reps``, the two alternating) in three states of one process:

1. fresh: nothing of ours has run;
2. after ``--predicts`` one-image predicts (ours, defaults);
3. after a folder predict at batch 32 (decoding threads or processes).

For each it prints the Python threads alive; at the end, per side, the host time per ATen
operator (``torch.profiler``, five calls) and, on CUDA, the device time per operator, the kernel
launches and the device's busy time a call. A third side, ours with its grouped convolutions
written as dense ones (block-diagonal weights, the same sums), tells whether the box branch's
``groups=4`` 3x3 convolutions (upstream's, which Ultralytics' YOLOv9-t head does not have) are
where our eager forward loses to the peer's.

    PYTHONPATH=... python tools/probe_eager_host.py --out probe-eager-host.md
"""

from __future__ import annotations

import argparse
import copy
import datetime
import os
import statistics
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from bench_predict import fresh_model, median_host_ms
from predict_media import write_images
from report import emit_report, log


def peer_net(device: torch.device) -> torch.nn.Module | None:
    os.environ.setdefault("YOLO_OFFLINE", "1")
    try:
        from ultralytics import YOLO
    except ImportError as err:
        log(f"Ultralytics not importable ({err}): ours only")
        return None
    torch.manual_seed(0)
    return copy.deepcopy(YOLO("yolov9t.yaml").model).fuse().eval().to(device)


def op_table(fn: Callable[[], Any], rows: int, cuda: bool) -> list[str]:
    """Five calls under ``torch.profiler``: host time per operator; on CUDA also device time per
    operator and a line of totals a call (kernel launches, device busy time)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    with profile(activities=activities) as prof:
        for _ in range(5):
            fn()
        if cuda:
            torch.cuda.synchronize()
    averages = prof.key_averages()
    out = ["```", averages.table(sort_by="self_cpu_time_total", row_limit=rows), "```"]
    if cuda:
        launches = sum(e.count for e in averages if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC"))
        busy_ms = sum(getattr(e, "self_device_time_total", 0.0) for e in averages) / 1e3 / 5
        out = [f"kernel launches a call: {launches / 5:.0f}; device busy {busy_ms:.3f} ms a call", "", *out,
               "```", averages.table(sort_by="self_device_time_total", row_limit=rows), "```"]
    return out


def dense_grouped(net: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``net`` whose grouped convolutions are dense ones with block-diagonal weights:
    the same sums (the added products are exact zeros), one ordinary convolution each."""
    dense = copy.deepcopy(net)
    for module in dense.modules():
        if isinstance(module, torch.nn.Conv2d) and module.groups > 1:
            out_c, in_per_group = module.weight.shape[:2]
            groups, per_out = module.groups, module.weight.shape[0] // module.groups
            weight = module.weight.new_zeros(out_c, in_per_group * groups, *module.weight.shape[2:])
            for g in range(groups):
                rows, cols = slice(g * per_out, (g + 1) * per_out), slice(g * in_per_group, (g + 1) * in_per_group)
                weight[rows, cols] = module.weight.detach()[rows]
            module.weight = torch.nn.Parameter(weight, requires_grad=False)
            module.groups, module.in_channels = 1, in_per_group * groups
    return dense


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--rounds", type=int, default=3, help="alternations of the two sides per state")
    p.add_argument("--predicts", type=int, default=20)
    p.add_argument("--images", type=int, default=256, help="folder size for state 3")
    p.add_argument("--device", default="cuda:0", help="cpu: a dry run of the script here")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    device = torch.device(args.device)
    model = fresh_model("t", 640)
    model.to(device)
    fused = model.fused_net()
    x = torch.rand(1, 3, 640, 640, device=device)
    peer = peer_net(device)
    dense = dense_grouped(fused)
    with torch.inference_mode():
        grouped, written_dense = model.inference_forward(x, fused), model.inference_forward(x, dense)
        assert isinstance(grouped, torch.Tensor) and isinstance(written_dense, torch.Tensor)
        gap = (grouped - written_dense).abs().max().item()
    log(f"grouped convolutions written dense: outputs within {gap:.2e} of the grouped network's")
    sides: dict[str, Callable[[], Any]] = {"ours": lambda: model.inference_forward(x, fused),
                                           "ours, grouped convs dense": lambda: model.inference_forward(x, dense)}
    if peer is not None:
        sides["ultralytics"] = lambda: peer(x)

    lines = [f"# Eager batch-1 forward, host-bound (fused, fp32 NCHW, 640 px; {datetime.date.today()}, "
             f"torch {torch.__version__}, {torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'})", "",
             "| state | threads | " + " | ".join(f"{s} ms" for s in sides) + " | ours / peer |",
             "|---|---:|" + "---:|" * len(sides) + "---:|"]

    def measure(state: str) -> None:
        with torch.inference_mode():
            for fn in sides.values():
                for _ in range(10):
                    fn()
            per_side: dict[str, list[float]] = {s: [] for s in sides}
            for _ in range(args.rounds):
                for side, fn in sides.items():
                    per_side[side].append(median_host_ms(fn, args.reps))
        medians = {s: statistics.median(v) for s, v in per_side.items()}
        ratio = f"{medians['ours'] / medians['ultralytics']:.2f}x" if "ultralytics" in medians else "-"
        names = sorted({t.name.rstrip("0123456789-_ ") for t in threading.enumerate()})
        lines.append(f"| {state} | {threading.active_count()} ({', '.join(names)[:80]}) | "
                     + " | ".join(f"{medians[s]:.2f} (rounds {', '.join(f'{v:.2f}' for v in per_side[s])})"
                                  for s in sides) + f" | {ratio} |")
        log(lines[-1])

    measure("fresh")
    with tempfile.TemporaryDirectory() as tmp:
        image = write_images(Path(tmp) / "one", 1)[0]
        for _ in range(args.predicts):
            model.predict(image, device=str(device))
        measure(f"after {args.predicts} one-image predicts")
        folder = Path(tmp) / "folder"
        write_images(folder, args.images)
        for _ in model.predict(str(folder), batch=32, stream=True, device=str(device)):
            pass
        measure("after a folder predict at batch 32")
    lines += ["", "By operator, after the three states, five calls each (host time; on CUDA then device time):", ""]
    with torch.inference_mode():
        for side, fn in sides.items():
            lines += [f"**{side}**", "", *op_table(fn, 14, device.type == "cuda"), ""]
    emit_report(lines, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
