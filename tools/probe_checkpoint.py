#!/usr/bin/env python
"""Where an epoch's checkpoint time goes: host copies, packing, ``torch.save``, the file writes.

Builds the state a YOLOv9 (``--size``) training run holds after one optimizer step (weights on the
device in channels_last, AdamW moments, the EMA copy) and times, medians of ``--reps``:

- ``build``: ``build_training_checkpoint`` (EMA weights to the host, raw weights and optimizer
  state packed), and the same built the pre-packing way (every tensor copied to the host alone);
- ``serialize``: ``torch.save`` into memory of both forms;
- ``write``: one serialized checkpoint written atomically (temp file, fsync, rename, folder
  fsync) to ``--dir`` (default: a folder in the working directory, where runs go) and to
  ``/dev/shm``, and the same without the fsyncs: what durability costs on this disk.

    python tools/probe_checkpoint.py --out probe-checkpoint.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from report import emit_report, median_call_ms


def _one_by_one(tree: Any) -> Any:
    """The pre-packing host copy: each tensor to the host alone (non-blocking), one sync at the end.
    ``tree``: a state dict or optimizer state (Any: the same nesting comes back, on the host)."""
    def copy(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return v.detach().contiguous().to("cpu", non_blocking=True)
        if isinstance(v, dict):
            return {k: copy(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return type(v)(copy(x) for x in v)
        return v
    out = copy(tree)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="t")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--dir", type=Path, default=Path("probe-checkpoint-files"))
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    from libreyolo_models import LibreYOLO9
    from libreyolo_models.atomic_write import atomic_write
    from libreyolo_models.checkpoint import serialized
    from libreyolo_models.train.checkpoints import build_training_checkpoint
    from libreyolo_models.train.ema import ModelEMA

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = LibreYOLO9(size=args.size).handle  # what the trainer holds
    net = model.net.to(device)
    if device.type == "cuda":
        net.to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    for param in net.parameters():
        param.grad = torch.zeros_like(param)
    opt.step()
    ema = ModelEMA(net)

    def build() -> dict[str, Any]:
        return build_training_checkpoint(model, net=net, ema=ema, optimizer=opt, scaler=None, epoch=0, best={},
                                         config={}, world_size=1, global_batch=32, run_dir=Path("."), loss=0.0,
                                         imgsz=model.imgsz)

    def build_one_by_one() -> dict[str, Any]:
        weights = _one_by_one(ema.ema.state_dict())
        return {**model.state_for_checkpoint(weights, imgsz=model.imgsz), "ema": weights,
                "train_model": _one_by_one(net.state_dict()), "optimizer": _one_by_one(opt.state_dict())}

    rows = [("build, packed (now)", median_call_ms(build, args.reps)),
            ("build, one tensor at a time (before)", median_call_ms(build_one_by_one, args.reps))]
    packed, plain = build(), build_one_by_one()
    rows += [("serialize packed", median_call_ms(lambda: serialized(packed), args.reps)),
             ("serialize one tensor at a time", median_call_ms(lambda: serialized(plain), args.reps))]
    data = serialized(packed)
    args.dir.mkdir(parents=True, exist_ok=True)
    folders = [args.dir, *([Path("/dev/shm")] if Path("/dev/shm").is_dir() else [])]
    for folder in folders:
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            target = Path(tmp) / "last.pt"

            def durable_write(target: Path = target) -> None:
                atomic_write(target, lambda fh: fh.write(data))
            rows.append((f"write + fsync ({folder})", median_call_ms(durable_write, args.reps)))

            def plain_write(target: Path = target) -> None:
                part = target.with_suffix(".tmp")
                part.write_bytes(data)
                os.replace(part, target)
            rows.append((f"write, no fsync ({folder})", median_call_ms(plain_write, args.reps)))
    lines = [f"Checkpoint of a YOLOv9-{args.size} training state ({len(data) / 1e6:.1f} MB), medians of {args.reps}; "
             f"{datetime.date.today()}, torch {torch.__version__}, "
             f"{torch.cuda.get_device_name(0) if device.type == 'cuda' else 'CPU'}", "",
             "| part | ms |", "|---|---:|", *(f"| {name} | {ms:.1f} |" for name, ms in rows)]
    emit_report(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
