"""SAM's automatic masks (predict without prompts): the point grid, stability score and mask boxes
as upstream defines them, the generator equal to a direct reference (all points decoded at once,
every mask at full size, torchvision's NMS) whatever its batch, and the options' errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torchvision.ops import batched_nms

from libreyolo_models import LibreYOLO
from libreyolo_models.contract.prompts import AutoMasks, PromptImage, logits_to_picture, to_input_coords
from libreyolo_models.errors import ConfigError
from libreyolo_models.families.sam import nn as sam_nn
from libreyolo_models.families.sam.automatic import generate_masks, mask_boxes, point_grid, stability_scores
from libreyolo_models.families.sam.nn import SamArch

TINY = SamArch(32, 2, 2, (1,), grid=4, window=2)
LOOSE = {"pred_iou_thresh": 0.0, "stability_score_thresh": 0.0, "box_nms_thresh": 1.0}  # keep all it gives


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> LibreYOLO:
    monkeypatch.setitem(sam_nn.ARCHS, "b", TINY)
    torch.manual_seed(0)
    model = LibreYOLO(family="sam", size="b")
    with torch.no_grad():  # untrained, it predicts IoUs near 0 and faint logits: lift both
        model.net.mask_decoder.iou_prediction_head.layers[2].bias += 0.5
        for mlp in model.net.mask_decoder.output_hypernetworks_mlps:
            mlp.layers[-1].weight.mul_(20)
            mlp.layers[-1].bias.mul_(20)
    return model


def picture(h: int = 48, w: int = 80) -> np.ndarray:
    return np.random.default_rng(1).integers(0, 256, (h, w, 3), dtype=np.uint8)


def test_grid_stability_and_boxes_follow_the_definitions() -> None:
    grid = point_grid(2, (50, 100))  # cell centres, x fastest
    assert grid.tolist() == [[25.0, 12.5], [75.0, 12.5], [25.0, 37.5], [75.0, 37.5]]
    logits = torch.tensor([[[2.0, 0.5], [-0.5, -2.0]], [[-3.0, -3.0], [-3.0, -3.0]]])
    assert stability_scores(logits, 1.0).tolist() == [pytest.approx(1 / 3), 0.0]  # 1 above +1 of 3 above -1
    masks = torch.zeros((2, 5, 6), dtype=torch.bool)
    masks[0, 1:3, 2:5] = True
    assert mask_boxes(masks).tolist() == [[2.0, 1.0, 4.0, 2.0], [0.0, 0.0, 0.0, 0.0]]  # inclusive; empty: zeros


class DiskDecoder:
    """Stands in for SAM's decoder with masks one can reason about: per point a disk around it
    (stable, predicted IoU 0.9 + a little by position), a faint blob (unstable) and the whole
    square (predicted IoU 0.5)."""

    def decode(self, embedding: torch.Tensor, points: tuple, boxes: None, input_hw: tuple[int, int],
               multimask: bool) -> tuple[torch.Tensor, torch.Tensor]:
        coords = points[0][:, 0]  # [B, 2] input pixels
        low = embedding.shape[-1] * 4
        centres = (torch.arange(low) + 0.5) * input_hw[0] / low
        ys, xs = torch.meshgrid(centres, centres, indexing="ij")
        dist = ((xs[None] - coords[:, 0, None, None]) ** 2 + (ys[None] - coords[:, 1, None, None]) ** 2).sqrt()
        disk = 200 * (12 - dist) / 12  # a sharp edge: stable
        faint = torch.full_like(disk, -0.2) + 0.7 * (dist < 6)
        whole = torch.full_like(disk, 5.0)
        scores = torch.stack([0.9 + coords[:, 0] / 1e4 + coords[:, 1] / 1e5, torch.full_like(coords[:, 0], 0.95),
                              torch.full_like(coords[:, 0], 0.5)], dim=1)
        return torch.stack([disk, faint, whole], dim=1), scores


def _reference(net: DiskDecoder, embedding: torch.Tensor, image: PromptImage, settings: AutoMasks) -> tuple:
    """Every grid point decoded at once, every mask at full size, filtered, torchvision's NMS."""
    grid = point_grid(settings.points_per_side, image.orig_shape)
    coords = to_input_coords(grid[:, None, :], image)
    logits, scores = net.decode(embedding, (coords, torch.ones(coords.shape[:2], dtype=torch.int64)), None,
                                (image.side, image.side), True)
    logits, scores = logits.flatten(0, 1), scores.flatten()
    full = logits_to_picture(logits[:, None], image)[:, 0]
    keep = (scores > settings.pred_iou_thresh) & (stability_scores(full, 1.0) > settings.stability_score_thresh)
    masks, scores = full[keep] > 0, scores[keep]
    order = batched_nms(mask_boxes(masks), scores, torch.zeros(len(scores)), settings.box_nms_thresh)
    return masks[order], scores[order], grid.repeat_interleave(3, dim=0)[keep][order]


@pytest.mark.parametrize("per_batch", [5, 64])
def test_the_generator_equals_a_direct_reference_at_any_batch(per_batch: int) -> None:
    image = PromptImage((48, 80), (38, 64), 64)
    embedding = torch.zeros(1, 256, 4, 4)
    settings = AutoMasks(points_per_side=4, points_per_batch=per_batch, box_nms_thresh=0.4)  # rows 9.6 px apart merge
    masks, scores, points = _reference(DiskDecoder(), embedding, image, settings)
    got = generate_masks(DiskDecoder(), embedding, image, settings)  # type: ignore[arg-type]
    assert 4 <= len(scores) < 16  # only disks pass (faint: unstable; whole: low IoU), overlapping ones merge
    assert torch.equal(got.masks[:, 0], masks) and torch.equal(got.scores[:, 0], scores)
    assert got.points is not None and torch.equal(got.points, points)
    for mask, (x, y) in zip(got.masks[:, 0], got.points.round().long().tolist()):
        assert mask[y, x]  # each mask covers the point that made it
    assert len(generate_masks(DiskDecoder(), embedding, image,  # type: ignore[arg-type]
                              AutoMasks(points_per_side=4, box_nms_thresh=1.0, max_masks=5)).scores) == 5


def test_predict_without_prompts_masks_everything(model: LibreYOLO) -> None:
    res = model(picture(), imgsz=64, points_per_side=4, **LOOSE)[0]
    masks = res.masks
    assert masks.automatic and masks.data.shape[1:] == (1, 48, 80) and len(masks) > 0
    assert torch.all(masks.scores[:-1, 0] >= masks.scores[1:, 0])  # best first
    assert res.summary() == f"{len(masks)} masks (automatic)" and "automatic" in repr(masks)
    assert res.plot().shape == (48, 80, 3) and res.numpy().masks.points.shape == (len(masks), 2)
    assert len(model(picture(), imgsz=64, points_per_side=4, max_det=2, **LOOSE)[0].masks) == 2
    nothing = model(picture(), imgsz=64, points_per_side=2, pred_iou_thresh=1.0)[0]
    assert len(nothing.masks) == 0 and nothing.summary() == "no masks (automatic)"


@pytest.mark.parametrize(("options", "message"), [
    ({"points_per_side": 0}, r"points_per_side=0 must be a whole number of at least 1"),
    ({"points_per_batch": 2.5}, r"points_per_batch=2.5 is not valid: expected int"),
    ({"pred_iou_thresh": 1.5}, r"pred_iou_thresh=1.5"),
    ({"box_nms_thresh": float("nan")}, r"box_nms_thresh=nan must be a finite number"),
    ({"points": [[1, 2]], "points_per_side": 8}, r"points_per_side= tunes automatic masks, made when no points= "
                                                  r"or boxes= are given"),
])
def test_automatic_options_are_checked(model: LibreYOLO, options: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        model(picture(), imgsz=64, **options)
