"""Time RTMDet's batched dynamic soft-label assigner and loss against a per-image loop reference.

Upstream measured RTMDet's assigner at 74 % of a training step (a Python loop over images and
ground truths, a host sync per ground truth). This compares, in one run and on one device:

- ``batched``: ``DynamicSoftLabelAssigner`` on the padded batch (what training runs);
- ``loss``: the whole ``RTMDetLoss`` (assignment, quality focal loss, GIoU) forward + backward;
- ``reference``: the per-image, per-ground-truth loop of ``tests/rtmdet_reference.py``.

    python tools/bench_rtmdet_assigner.py                       # CPU, batch 8, 640 px, 0..50 boxes
    python tools/bench_rtmdet_assigner.py --device cuda --reps 50
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "libreyolo-models" / "tests"))


class Inputs(NamedTuple):
    """One synthetic batch: head outputs and targets on the device, and the CPU copies the loop
    reference reads."""

    counts: list[int]  # boxes per image
    n_priors: int
    targets: Tensor  # [N, 6] rows (image, class, x, y, w, h), normalised
    cls_scores: list[Tensor]
    distances: list[Tensor]
    logits: Tensor
    boxes: Tensor
    priors: Tensor
    strides: Tensor
    gt_labels: list[Tensor]
    gt_boxes: list[Tensor]
    cpu_logits: Tensor
    cpu_boxes: Tensor
    cpu_priors: Tensor
    cpu_strides: Tensor


def _inputs(batch: int, imgsz: int, nc: int, max_boxes: int, device: torch.device) -> Inputs:
    from libreyolo_models.families.rtmdet.nn import STRIDES, grid_corners
    from libreyolo_models.layers.boxes import xywh_to_xyxy

    g = torch.Generator().manual_seed(0)
    shapes = [(imgsz // s, imgsz // s) for s in STRIDES]
    priors, strides = grid_corners(shapes, STRIDES, device=torch.device("cpu"), dtype=torch.float32)
    a = len(priors)
    counts = torch.linspace(0, max_boxes, batch).round().long().tolist()  # 0 .. max_boxes per image
    rows = []
    for b, n in enumerate(counts):
        wh = torch.rand(n, 2, generator=g) * 0.3 + 0.02
        xy = torch.rand(n, 2, generator=g) * (1 - wh) + wh / 2
        rows.append(torch.cat((torch.full((n, 1), float(b)), torch.randint(0, nc, (n, 1), generator=g).float(), xy, wh), 1))
    targets = torch.cat(rows)
    cls_scores = [torch.randn(batch, nc, h, w, generator=g) - 3 for h, w in shapes]
    distances = [(torch.rand(batch, 4, h, w, generator=g) * 6 + 0.5) * s for (h, w), s in zip(shapes, STRIDES)]
    logits = torch.cat([c.flatten(2) for c in cls_scores], 2).transpose(1, 2)
    dist = torch.cat([d.flatten(2) for d in distances], 2).transpose(1, 2)
    boxes = torch.cat((priors - dist[..., :2], priors + dist[..., 2:]), -1)
    gt_boxes = [xywh_to_xyxy(r[:, 2:] * imgsz) for r in rows]
    gt_labels = [r[:, 1].long() for r in rows]
    def move(ts: list[Tensor]) -> list[Tensor]:
        return [t.to(device) for t in ts]

    return Inputs(counts, a, targets, move(cls_scores), move(distances), logits.to(device), boxes.to(device),
                  priors.to(device), strides.to(device), gt_labels, gt_boxes, logits, boxes, priors, strides)


def _time_ms(fn: Callable[[], object], reps: int, device: torch.device) -> float:
    fn()  # warmup
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--nc", type=int, default=80)
    parser.add_argument("--max-boxes", type=int, default=50)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--no-reference", action="store_true", help="skip the (slow) per-image loop")
    args = parser.parse_args()

    from libreyolo_models.families.rtmdet.assign import DynamicSoftLabelAssigner
    from libreyolo_models.families.rtmdet.loss import RTMDetLoss

    device = torch.device(args.device)
    (counts, a, targets, cls_scores, distances, logits, boxes, priors, strides, gt_labels, gt_boxes,
     cpu_logits, cpu_boxes, cpu_priors, cpu_strides) = _inputs(args.batch, args.imgsz, args.nc, args.max_boxes, device)
    print(f"device {device}, torch {torch.__version__}, threads {torch.get_num_threads()}; batch {args.batch}, "
          f"{args.imgsz} px ({a} priors), nc {args.nc}, boxes per image {counts}")
    assigner = DynamicSoftLabelAssigner()
    loss = RTMDetLoss(args.nc)
    labels_p, boxes_p, mask_p = loss.ground_truths(targets, args.batch, (args.imgsz, args.imgsz), device)
    batched = _time_ms(lambda: assigner(logits, boxes, priors, strides[:, 0], labels_p, boxes_p, mask_p),
                       args.reps, device)
    params = [t.requires_grad_() for t in (*cls_scores, *distances)]

    def loss_step() -> None:
        total, _ = loss((cls_scores, distances), targets)
        total.backward()
        for p in params:
            p.grad = None

    full = _time_ms(loss_step, args.reps, device)
    print(f"batched assigner      {batched:9.1f} ms")
    print(f"loss fwd+bwd (all)    {full:9.1f} ms")
    if not args.no_reference:
        from rtmdet_reference import assign_one_image

        def reference() -> None:
            for b in range(args.batch):
                assign_one_image(cpu_logits[b], cpu_boxes[b], cpu_priors, cpu_strides[:, 0], gt_labels[b], gt_boxes[b])

        ref = _time_ms(reference, max(1, args.reps // 2), torch.device("cpu"))
        print(f"per-image loop (CPU)  {ref:9.1f} ms   -> batched is {ref / batched:.1f}x faster")


if __name__ == "__main__":
    main()
