#!/usr/bin/env python
"""Operations one YOLOv9-t call dispatches, ours against Ultralytics' (CPU, no GPU needed).

An eager step on a GPU is launch-bound (docs/benchmarks.md): its time follows the number of
operations the host issues, so this counts them, by ATen operator, with a ``TorchDispatchMode``:

- inference: the fused network at batch 1, 640 px, under ``inference_mode`` (what predict runs);
- training: forward in train mode, the loss, and the backward pass with gradients set to None
  before it, as a training step runs it (batch 2 at 320 px: the counts do not depend on the
  size, the time on the CPU does); each side runs one step first, so per-shape caches exist.

Counted on the CPU in fp32, so before autocast adds a cast per weight (both sides alike). The
Ultralytics side runs in a child process with Ultralytics on its path (``--peer-path``, the
folder ``tools/gpu_session.sh`` installs the carried wheel into, or any site-packages holding it).

    python tools/count_ops.py                      # ours, and Ultralytics when importable
    python tools/count_ops.py --peer-path /tmp/peer-site --out ops.md
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from report import emit_report, log
from torch.utils._python_dispatch import TorchDispatchMode

STAGES = ("inference (fused, batch 1, 640 px)", "training forward", "loss", "backward")


class _Counter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.seen[str(func.overloadpacket).split(".")[-1]] += 1
        return func(*args, **(kwargs or {}))


def _count(fn: Callable[[], Any]) -> tuple[collections.Counter[str], Any]:
    counter = _Counter()
    with counter:
        out = fn()
    return counter.seen, out


def ours() -> dict[str, dict[str, int]]:
    from libreyolo_models import LibreYOLO9
    from libreyolo_models.contract.family import LossContext

    torch.manual_seed(0)
    model = LibreYOLO9(size="t")
    fused, x = model.fused_net(), torch.rand(1, 3, 640, 640)
    counts: dict[str, dict[str, int]] = {}
    with torch.inference_mode():
        model.inference_forward(x, fused)
        counts[STAGES[0]], _ = _count(lambda: model.inference_forward(x, fused))
    net, family = model.net.train(), model.family
    images = torch.rand(2, 3, 320, 320)
    targets = family.sample_targets(2, 320, torch.Generator().manual_seed(0))
    ctx = LossContext(global_batch=2)
    family.compute_loss(family.training_forward(net, images), targets, ctx).total.backward()  # caches built
    counts[STAGES[1]], out = _count(lambda: family.training_forward(net, images))
    counts[STAGES[2]], loss = _count(lambda: family.compute_loss(out, targets, ctx).total)
    net.zero_grad(set_to_none=True)  # a training step's backward: gradients stolen, not added
    counts[STAGES[3]], _ = _count(loss.backward)
    return {k: dict(v) for k, v in counts.items()}


def peer() -> dict[str, dict[str, int]]:
    import copy

    from ultralytics import YOLO
    from ultralytics.cfg import get_cfg

    torch.manual_seed(0)
    model = YOLO("yolov9t.yaml").model
    fused, x = copy.deepcopy(model).fuse().eval(), torch.rand(1, 3, 640, 640)
    counts: dict[str, dict[str, int]] = {}
    with torch.inference_mode():
        fused(x)
        counts[STAGES[0]], _ = _count(lambda: fused(x))
    model.args = get_cfg()
    model.train()
    for p in model.parameters():
        p.requires_grad_(True)
    g = torch.Generator().manual_seed(0)
    images = torch.rand(2, 3, 320, 320)
    batch = {"img": images, "batch_idx": torch.tensor([0.0, 0, 0, 1, 1, 1]),
             "cls": torch.randint(0, 80, (6, 1), generator=g).float(),
             "bboxes": torch.rand(6, 4, generator=g) * 0.4 + torch.tensor([0.3, 0.3, 0.0, 0.0])}
    model.criterion = model.init_criterion()
    model.loss(batch, model(images))[0].sum().backward()  # caches built, as for ours
    counts[STAGES[1]], preds = _count(lambda: model(images))
    counts[STAGES[2]], loss = _count(lambda: model.loss(batch, preds)[0].sum())
    model.zero_grad(set_to_none=True)
    counts[STAGES[3]], _ = _count(loss.backward)
    return {k: dict(v) for k, v in counts.items()}


def _peer_counts(peer_path: str | None) -> dict[str, dict[str, int]] | str:
    env = dict(os.environ)
    if peer_path:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [env.get("PYTHONPATH", ""), peer_path]))
    proc = subprocess.run([sys.executable, __file__, "--peer-child"], env=env, capture_output=True, text=True,
                          timeout=600, cwd=Path(__file__).parent)
    if proc.returncode != 0:
        return (proc.stderr.strip().splitlines() or ["failed"])[-1][:200]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _top(counts: dict[str, int], n: int = 6) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])[:n])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--peer-path", default=None, help="a folder holding Ultralytics, added to the child's path")
    p.add_argument("--no-peer", action="store_true")
    p.add_argument("--peer-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    if args.peer_child:
        print(json.dumps(peer()))
        return 0
    log("counting ours")
    mine = ours()
    theirs = "not run (--no-peer)" if args.no_peer else _peer_counts(args.peer_path)
    lines = [f"# Operations dispatched per call, YOLOv9-t, CPU fp32 (torch {torch.__version__})", "",
             "| stage | ours | Ultralytics | ours, most frequent | Ultralytics, most frequent |", "|---|---:|---:|---|---|"]
    for stage in STAGES:
        peer_stage = theirs.get(stage, {}) if isinstance(theirs, dict) else {}
        lines.append(f"| {stage} | {sum(mine[stage].values())} | {sum(peer_stage.values()) if peer_stage else '-'} | "
                     f"{_top(mine[stage])} | {_top(peer_stage) if peer_stage else '-'} |")
    if isinstance(theirs, str):
        lines += ["", f"Ultralytics: {theirs}"]
    emit_report(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
