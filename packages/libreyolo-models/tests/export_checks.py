"""Comparisons of an exported model's results with the PyTorch model's, per task, at the
tolerances of issue 18's acceptance (same classes, box IoU >= 0.99, scores within 1e-3 in fp32).
Import as ``from export_checks import assert_same_results`` (the tests folder is on ``sys.path``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from libreyolo_models import LibreYOLO
from libreyolo_models.layers.boxes import box_iou


def yolo9_with_spread_biases(names: list[str], imgsz: int) -> LibreYOLO:
    """Untrained YOLOv9-t in eval mode with its biases spread (seeded): scores of every level
    between 0 and 1, so hundreds of detections survive NMS and every one is compared."""
    torch.manual_seed(0)
    model = LibreYOLO(family="yolo9", size="t", nc=len(names), names=names, imgsz=imgsz).eval()
    with torch.no_grad():
        for name, param in model.net.named_parameters():
            if name.endswith("bias"):
                param.normal_(0.0, 0.5)
    return model


def assert_same_detections(expected: torch.Tensor, got: torch.Tensor, *, iou: float = 0.99, score: float = 1e-3) -> None:
    """One to one: every PyTorch detection has its own exported one of the same class with box
    IoU >= ``iou`` (or the same corners within 0.05 px) and a score within ``score`` (the closest
    unused one; near-equal scores may swap places in the sorted lists)."""
    assert len(got) == len(expected), f"{len(got)} detections, PyTorch has {len(expected)}"
    if not len(expected):
        return
    overlap = box_iou(expected[:, :4], got[:, :4])
    # An untrained head decodes some boxes with x2 <= x1 (zero area, IoU 0 with themselves): those
    # match when every corner is within 0.05 px.
    twin = (expected[:, None, :4] - got[None, :, :4]).abs().amax(-1) <= 0.05
    overlap = torch.where(twin, torch.ones_like(overlap), overlap)
    same = expected[:, 5:6] == got[:, 5].unsqueeze(0)
    close = (expected[:, 4:5] - got[:, 4].unsqueeze(0)).abs()
    cost = (1 - overlap) + close + (~same).float() * 10
    used: set[int] = set()
    for i in range(len(expected)):
        order = [j for j in cost[i].argsort().tolist() if j not in used]
        j = order[0]
        used.add(j)
        assert same[i, j], f"detection {i}: class {expected[i, 5].item()} has no exported match"
        assert overlap[i, j].item() >= iou, f"detection {i}: box IoU {overlap[i, j].item():.4f}"
        assert close[i, j].item() <= score, f"detection {i}: scores differ by {close[i, j].item():.2e}"


def assert_same_points(expected: torch.Tensor, got: torch.Tensor, *, score: float = 1e-3, distance: float = 0.05) -> None:
    """One to one: every PyTorch point ``(x, y, class, score)`` has its own exported one of the
    same class within ``distance`` pixels and ``score`` of its score."""
    assert len(got) == len(expected), f"{len(got)} points, PyTorch has {len(expected)}"
    used: set[int] = set()
    for i, (x, y, cls, conf) in enumerate(expected.tolist()):
        near = [j for j, (x2, y2, c2, s2) in enumerate(got.tolist()) if j not in used and c2 == cls
                and abs(s2 - conf) <= score and ((x2 - x) ** 2 + (y2 - y) ** 2) ** 0.5 <= distance]
        assert near, f"point {i} ({x:.2f}, {y:.2f}) of class {cls:g} has no exported twin"
        used.add(near[0])


def assert_same_results(ours: Sequence, theirs: Sequence, *, score: float = 1e-3) -> None:
    """Per image: detections as above; class probabilities within ``score`` and the same top-1
    (unless PyTorch's best two are closer than ``score``); semantic maps equal on >= 99.9% of the
    pixels (an arg-max may flip where two logits tie to rounding); points one to one (class, within
    0.05 px and ``score``); restored pictures within ``score`` per value."""
    assert len(ours) == len(theirs)
    for index, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        if a.boxes is not None:
            assert_same_detections(a.boxes.data.cpu(), b.boxes.data.cpu(), score=score)
        if a.probs is not None:
            pa, pb = a.probs.data.float().cpu(), b.probs.data.float().cpu()
            assert (pa - pb).abs().max().item() <= score, f"image {index}: probabilities differ by {(pa - pb).abs().max()}"
            best = pa.topk(2).values
            assert a.probs.top1 == b.probs.top1 or (best[0] - best[1]).item() < score, f"image {index}: top-1 differs"
        if a.masks is not None:
            agree = (a.masks.data == b.masks.data).float().mean().item()
            assert agree >= 0.999, f"image {index}: class maps agree on {agree:.4%} of the pixels"
        if a.points is not None:
            assert_same_points(a.points.data.cpu(), b.points.data.cpu(), score=score)
        if a.image is not None:
            gap = (a.image.data.float() - b.image.data.float()).abs().max().item()
            assert gap <= score, f"image {index}: restored pictures differ by {gap:.2e}"
