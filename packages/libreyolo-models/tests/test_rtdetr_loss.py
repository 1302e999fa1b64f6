"""RT-DETR's set loss: what each term rewards, empty batches, the normaliser rule, and the
one-process vs two-rank (Gloo, CPU) identity."""

from __future__ import annotations

import pytest
import torch
from rtdetr_synthetic import (
    BACKGROUND_HALF,
    BOXES,
    GAINS,
    NC,
    QUERIES,
    batch_loss,
    image_outputs,
    rank_loss,
    target_rows,
)

from libreyolo_models.layers.detr.denoising import build_denoising
from libreyolo_models.layers.detr.set_loss import RTDETRLoss
from libreyolo_models.layers.set_targets import group_targets

L = 2


def _perfect(images: list[int], boxes: dict, *, shift: float = 0.0):  # noqa: ANN202
    """Outputs where query j of every set predicts image box j exactly (plus ``shift``) with a
    confident logit for its class, every other query background; denoising positives likewise."""
    targets = target_rows(images, boxes)
    grouped = group_targets(targets, len(images), NC)
    dn = build_denoising(grouped, NC, QUERIES, num_denoising=6, label_noise_ratio=0.0, box_noise_scale=0.0)
    b, d = len(images), dn.num_queries
    logits = torch.full((L, b, QUERIES, NC), -8.0)
    out_boxes = torch.full((L, b, QUERIES, 4), 0.05)
    dn_logits = torch.full((L, b, d, NC), -8.0)
    dn_boxes = torch.full((L, b, d, 4), 0.05)
    for pos, image in enumerate(images):
        for j, (cls, *box) in enumerate(boxes[image]):
            moved = torch.tensor(box) + torch.tensor([shift, 0, 0, 0])
            logits[:, pos, j, cls], out_boxes[:, pos, j] = 8.0, moved
            for slot in dn.positive_slots(pos)[j::len(boxes[image])]:
                dn_logits[:, pos, slot, cls], dn_boxes[:, pos, slot] = 8.0, moved
    outputs = {"logits": logits, "boxes": out_boxes, "enc_logits": logits[0].clone(), "enc_boxes": out_boxes[0].clone(),
               "dn_logits": dn_logits, "dn_boxes": dn_boxes}
    return outputs, grouped, dn


def test_perfect_predictions_have_zero_box_terms_and_a_small_classification_term() -> None:
    outputs, grouped, dn = _perfect([0, 1], BOXES)
    _, items = RTDETRLoss(NC, GAINS)(outputs, grouped, dn)
    vfl, bbox, giou = items.tolist()
    assert bbox == pytest.approx(0, abs=1e-6) and giou == pytest.approx(0, abs=1e-6)
    assert 0 < vfl < 0.05
    _, worse = RTDETRLoss(NC, GAINS)(_perfect([0, 1], BOXES, shift=0.05)[0], grouped, dn)
    assert worse[1] > 0.1 and worse[2] > 0.1 and worse[0] > vfl  # IoU < 1 lowers the varifocal target


def test_each_term_follows_its_gain() -> None:
    outputs, grouped, dn = _perfect([0, 1], BOXES, shift=0.03)
    _, base = RTDETRLoss(NC, GAINS)(outputs, grouped, dn)
    _, scaled = RTDETRLoss(NC, {"vfl": 2.0, "bbox": 0.0, "giou": 1.0})(outputs, grouped, dn)
    torch.testing.assert_close(scaled, base * torch.tensor([2.0, 0.0, 0.5]))
    with pytest.raises(ValueError, match=r"lack \['giou'\]"):
        RTDETRLoss(NC, {"vfl": 1.0, "bbox": 5.0})


def test_a_batch_without_boxes_learns_only_background_and_keeps_every_output_in_the_graph() -> None:
    total, items, grads = batch_loss([2, 2], BOXES)
    vfl, bbox, giou = items.tolist()
    assert vfl > 0 and bbox == 0 and giou == 0 and torch.isfinite(total)
    for per_image in grads.values():
        assert per_image["logits"].abs().sum() > 0 and per_image["enc_logits"].abs().sum() > 0
        assert torch.count_nonzero(per_image["boxes"]) == 0  # a zero gradient, not a missing one


def test_the_normaliser_is_read_once_per_call_and_clamped_only_after_the_sum() -> None:
    seen: list[float] = []

    def others_have_four(local: torch.Tensor) -> torch.Tensor:
        seen.append(float(local))
        return local + 4

    _, own, _ = batch_loss([0, 1], BOXES)
    _, shared, _ = batch_loss([0, 1], BOXES, normalizer_sum=others_have_four)
    assert seen == [5.0]  # images 0 and 1 hold 5 boxes
    torch.testing.assert_close(shared, own * 5 / 9)
    seen.clear()
    _, background, _ = batch_loss([2, 2], BOXES, normalizer_sum=others_have_four)
    _, alone, _ = batch_loss([2, 2], BOXES)
    assert seen == [0.0]  # called even without a box, so every rank's all-reduce lines up
    torch.testing.assert_close(background, alone / 4)  # N = 0 + 4, not max(0, 1) + 4


def test_items_scale_with_world_size_to_undo_ddp_averaging() -> None:
    _, one, _ = batch_loss([0, 1], BOXES)
    _, two, _ = batch_loss([0, 1], BOXES, world_size=2)
    torch.testing.assert_close(two, one * 2)


def test_denoising_terms_are_normalised_by_the_number_of_groups() -> None:
    outputs, grouped, dn = _perfect([0, 1], BOXES, shift=0.04)
    no_dn = dict(outputs, dn_logits=outputs["dn_logits"][:, :, :0], dn_boxes=outputs["dn_boxes"][:, :, :0])
    empty = build_denoising(group_targets(torch.zeros(0, 6), 2, NC), NC, QUERIES)
    _, with_dn = RTDETRLoss(NC, GAINS)(outputs, grouped, dn)
    _, without = RTDETRLoss(NC, GAINS)(no_dn, grouped, empty)
    # Every denoising positive repeats its layer's matched prediction, so per layer it adds the
    # same box terms once more (2 groups, each counted 1/2): box terms exactly double.
    assert dn.groups == 2
    torch.testing.assert_close(with_dn[1:], without[1:] * torch.tensor([(2 * L + 1) / (L + 1)] * 2))


@pytest.fixture(scope="module")
def two_ranks() -> list[dict]:
    """Both box sets on two Gloo ranks (one spawn: starting processes is the slow part)."""
    from libreyolo_ddp import DevicePlan, spawn

    return spawn(rank_loss, ([[0, 1], [2, 3]],), devices=DevicePlan.cpu_workers(2), timeout_s=240)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("background", [False, True], ids=["boxes_on_both_ranks", "all_background_rank"])
def test_two_ranks_at_half_batch_equal_one_process_at_full_batch(two_ranks: list[dict], background: bool) -> None:
    boxes = BACKGROUND_HALF if background else BOXES
    total, items, grads = batch_loss([0, 1, 2, 3], boxes)
    ranks = [rank[background] for rank in two_ranks]
    assert [r["calls"] for r in ranks] == ([[5.0], [0.0]] if background else [[5.0], [3.0]])
    mean_items = (ranks[0]["items"] + ranks[1]["items"]) / 2
    if background:
        # The box terms agree; the classification term differs by design: one process pads images
        # 2 and 3 with denoising slots (background targets) that a box-free rank never builds.
        torch.testing.assert_close(mean_items[1:], items[1:], rtol=1e-5, atol=1e-6)
        return
    torch.testing.assert_close((ranks[0]["total"] + ranks[1]["total"]) / 2, total, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(mean_items, items, rtol=1e-5, atol=1e-6)
    # DDP averages gradients: each rank's gradient, halved, is the one-process gradient.
    for rank in ranks:
        for image, per_name in rank["grads"].items():
            for name, grad in per_name.items():
                torch.testing.assert_close(grad / 2, grads[image][name], rtol=1e-5, atol=1e-7)


def test_per_rank_normalisation_would_not_match_one_process() -> None:
    """The control for the two-rank test: each half normalised by its own count is not the same."""
    _, full, _ = batch_loss([0, 1, 2, 3], BOXES)
    halves = [batch_loss(h, BOXES, world_size=2)[1] for h in ([0, 1], [2, 3])]
    assert not torch.allclose((halves[0] + halves[1]) / 2, full, rtol=1e-3)


def test_synthetic_outputs_are_a_function_of_the_image_alone() -> None:
    a, b = image_outputs(3, 12), image_outputs(3, 12)
    assert all(torch.equal(a[k], b[k]) for k in a)
