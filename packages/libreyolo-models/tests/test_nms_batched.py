"""One NMS call per batch gives each image exactly the detections per-image NMS gives it."""

from __future__ import annotations

import pytest
import torch
import torchvision

from libreyolo_models.layers.nms import nms_per_image


def _reference(pred: torch.Tensor, *, conf: float, iou: float, max_det: int, classes=None,
               agnostic: bool = False) -> list[torch.Tensor]:
    out = []
    for p in pred:
        boxes, (scores, cls) = p[:4].T, p[4:].max(0)
        keep = scores > conf
        if classes is not None:
            keep &= torch.isin(cls, torch.tensor(classes))
        b, s, c = boxes[keep], scores[keep], cls[keep]
        kept = torchvision.ops.batched_nms(b.double(), s.double(), torch.zeros_like(c) if agnostic else c, iou)
        out.append(torch.cat((b[kept], s[kept, None], c[kept, None].float()), 1)[:max_det])
    return out


def _predictions(batch: int, nc: int, anchors: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(batch, 2, anchors, generator=g) * 600
    wh = torch.rand(batch, 2, anchors, generator=g) * 120 + 1
    scores = torch.rand(batch, nc, anchors, generator=g) ** 3
    return torch.cat((xy, xy + wh, scores), 1)


@pytest.mark.parametrize(("agnostic", "classes", "max_det"), [(False, None, 300), (True, None, 300),
                                                             (False, [0, 2], 300), (False, None, 5)])
def test_batched_nms_equals_per_image_nms(agnostic, classes, max_det) -> None:
    pred = _predictions(4, 3, 600, seed=0)
    pred[2, 4:] = 0.0  # an image without any candidate
    got = nms_per_image(pred, conf=0.25, iou=0.5, max_det=max_det, classes=classes, agnostic=agnostic)
    want = _reference(pred, conf=0.25, iou=0.5, max_det=max_det, classes=classes, agnostic=agnostic)
    assert [len(g) for g in got] == [len(w) for w in want] and len(got[2]) == 0 and len(got[0]) >= min(6, max_det)
    for g, w in zip(got, want):
        assert torch.equal(g, w)


def test_an_image_gets_the_same_detections_alone_and_in_a_batch() -> None:
    pred = _predictions(6, 4, 800, seed=1)
    together = nms_per_image(pred, conf=0.2, iou=0.6, max_det=100)
    alone = [nms_per_image(pred[i:i + 1], conf=0.2, iou=0.6, max_det=100)[0] for i in range(6)]
    assert all(torch.equal(a, b) for a, b in zip(together, alone))


def test_candidate_cap_keeps_the_best_scores() -> None:
    pred = _predictions(2, 2, 500, seed=2)
    got = nms_per_image(pred, conf=0.0, iou=1.0, max_det=1000, max_candidates=50)
    assert [len(g) for g in got] == [50, 50]
    best = pred[0, 4:].max(0).values.topk(50).values
    assert torch.equal(got[0][:, 4], best)


def test_no_candidates_anywhere_gives_empty_results() -> None:
    got = nms_per_image(torch.zeros(3, 6, 10), conf=0.5, iou=0.5, max_det=10)
    assert [tuple(g.shape) for g in got] == [(0, 6)] * 3


@pytest.mark.cuda
def test_batched_nms_on_the_gpu_equals_the_cpu() -> None:
    pred = _predictions(8, 80, 2100, seed=3)
    cpu = nms_per_image(pred, conf=0.25, iou=0.7, max_det=300)
    gpu = nms_per_image(pred.cuda(), conf=0.25, iou=0.7, max_det=300)
    assert [len(c) for c in cpu] == [len(g) for g in gpu]
    for c, g in zip(cpu, gpu):  # equal scores may come out in another order (sorting is not stable)
        assert torch.allclose(_rows_in_order(c), _rows_in_order(g.cpu()))


def _rows_in_order(rows: torch.Tensor) -> torch.Tensor:
    """Rows sorted by score, then class, then x1, y1 (a total order that ignores tie order)."""
    order = torch.arange(len(rows))
    for col in (1, 0, 5, 4):  # least significant key first; stable sorts compose
        order = order[torch.sort(rows[order, col], stable=True, descending=col == 4).indices]
    return rows[order]


def _op_counts(fn) -> dict[str, int]:  # noqa: ANN001
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return {e.key: e.count for e in prof.key_averages()}


def test_one_image_pays_no_sort_and_one_nonzero_before_nms() -> None:
    pred = _predictions(1, 3, 2100, seed=7)  # about 200 candidates
    ops = _op_counts(lambda: nms_per_image(pred, conf=0.9, iou=0.5, max_det=300))
    # top-k over every anchor was a full sort per call; the host waits once, in nonzero.
    assert ops.get("aten::topk", 0) == 0
    assert ops.get("aten::nonzero", 0) == 1 and ops.get("aten::gather", 0) == 0
    capped = _op_counts(lambda: nms_per_image(pred, conf=0.0, iou=0.5, max_det=300, max_candidates=100))
    assert capped.get("aten::topk", 0) == 1  # too many candidates: cut by score first


def test_scale_to_original_undoes_the_letterbox_and_clips() -> None:
    from libreyolo_models.layers.nms import scale_to_original

    det = torch.tensor([[13.0, 27.0, 303.0, 407.0, 0.9, 1.0], [-5.0, -5.0, 700.0, 700.0, 0.5, 0.0]])
    out = scale_to_original(det, 0.5, (3.0, 7.0), (480, 640))
    expected = torch.tensor([[20.0, 40.0, 600.0, 480.0, 0.9, 1.0], [0.0, 0.0, 640.0, 480.0, 0.5, 0.0]])
    assert torch.equal(out, expected)  # (x - pad) / ratio, clipped to the 640x480 image
    assert det[0, 0] == 13.0  # the input is left alone
