"""YOLOX loss: learning signal, the L1 switch, empty and uneven batches, and the 1-vs-2-rank
gradient identity (CPU; the device checks are marked cuda)."""

from __future__ import annotations

import pytest
import torch
from rank_split import assert_two_ranks_average_to_one_process, leaves

from libreyolo_models import LibreYOLOX, LossContext
from libreyolo_models.errors import ConfigError
from libreyolo_models.families.yolox.loss import YoloxLoss
from libreyolo_models.families.yolox.nn import YoloxNet

NC = 3
STRIDES = (8, 16, 32)
TARGETS = torch.tensor([  # (image, class, cx, cy, w, h), normalized
    [0, 1, 0.30, 0.35, 0.30, 0.40],
    [0, 2, 0.75, 0.70, 0.35, 0.30],
    [1, 0, 0.50, 0.55, 0.45, 0.50],
    [3, 2, 0.40, 0.60, 0.25, 0.30],
])


def _perfect_outputs(targets: torch.Tensor, batch: int, hw=(64, 64)) -> list[torch.Tensor]:
    """Raw maps in which every anchor within 1.5 strides of a target's centre decodes to exactly that
    box, with a confident objectness and class; every other anchor is confidently background."""
    height, width = hw
    outputs = []
    for s in STRIDES:
        gh, gw = height // s, width // s
        gy, gx = torch.meshgrid(torch.arange(gh, dtype=torch.float32), torch.arange(gw, dtype=torch.float32),
                                indexing="ij")
        out = torch.zeros(batch, 5 + NC, gh, gw)
        out[:, 4:] = -6.0
        for image, c, cx, cy, bw, bh in targets.tolist():
            cx, cy, bw, bh = cx * width, cy * height, bw * width, bh * height
            near = ((gx + 0.5) * s - cx).abs().maximum(((gy + 0.5) * s - cy).abs()) < 1.5 * s
            i = int(image)
            code = torch.stack((cx / s - gx, cy / s - gy, torch.full_like(gx, bw / s).log(),
                                torch.full_like(gx, bh / s).log()))
            out[i, :4] = torch.where(near, code, out[i, :4])
            out[i, 4] = torch.where(near, torch.tensor(6.0), out[i, 4])
            out[i, 5 + int(c)] = torch.where(near, torch.tensor(6.0), out[i, 5 + int(c)])
        outputs.append(out)
    return outputs


def _random_outputs(batch: int, hw=(64, 64), seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, 5 + NC, hw[0] // s, hw[1] // s, generator=gen) for s in STRIDES]


def _near_perfect(targets: torch.Tensor, batch: int, seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [p + 0.3 * torch.randn(p.shape, generator=gen) for p in _perfect_outputs(targets, batch)]


PLAIN_SUMS = {"normalizer_sum": torch.ones_like, "global_batch": 1}  # N := 1: items are plain sums


@pytest.mark.parametrize("hw", [(64, 64), (64, 96)])
def test_perfect_predictions_give_near_zero_box_terms(hw):
    outputs = _perfect_outputs(TARGETS, 4, hw)
    _, items = YoloxLoss(NC)(outputs, TARGETS, use_l1=True)
    iou, _, cls, l1 = items.tolist()
    assert iou < 1e-5 and l1 < 1e-5
    assert cls < 0.2  # confident logits of +-6 leave a little BCE
    # (obj is not small: SimOTA keeps at most 10 of the confident anchors near each centre as
    # positives, and the rest are told they are background)


def test_loss_decreases_when_predictions_move_toward_the_targets():
    loss_fn = YoloxLoss(NC)
    far = _random_outputs(4, seed=1)
    perfect = _perfect_outputs(TARGETS, 4)
    losses = []
    for t in (0.0, 0.5, 0.9):
        mixed = [(1 - t) * f + t * p for f, p in zip(far, perfect)]
        losses.append(float(loss_fn(mixed, TARGETS, use_l1=True)[0]))
    assert losses[0] > losses[1] > losses[2]


def test_gradient_steps_on_the_outputs_reduce_every_term():
    outputs = leaves(_near_perfect(TARGETS, 4, seed=3))
    loss_fn = YoloxLoss(NC)
    before = loss_fn(outputs, TARGETS, use_l1=True)[1]
    optimizer = torch.optim.SGD(outputs, lr=0.5)
    for _ in range(10):
        optimizer.zero_grad()
        loss_fn(outputs, TARGETS, use_l1=True, global_batch=1)[0].backward()
        optimizer.step()
    after = loss_fn(outputs, TARGETS, use_l1=True)[1]
    assert (after < before).all(), (before, after)


def test_l1_term_is_zero_and_free_until_switched_on():
    outputs = _near_perfect(TARGETS, 4, seed=5)
    loss_fn = YoloxLoss(NC)
    off_loss, off = loss_fn(outputs, TARGETS, use_l1=False)
    on_loss, on = loss_fn(outputs, TARGETS, use_l1=True)
    assert off[3] == 0 and on[3] > 0
    torch.testing.assert_close(on[:3], off[:3])  # the other terms do not change
    torch.testing.assert_close(on_loss - off_loss, on[3] * 4)


def test_family_switches_l1_on_at_exactly_the_first_mosaic_free_epoch():
    model = LibreYOLOX(size="n", nc=NC)
    reasons = [model.family.epoch_start(epoch, 10, 3) for epoch in range(10)]
    assert [i for i, r in enumerate(reasons) if r] == [7]  # trainer closes mosaic at epoch 10 - 3
    assert "L1" in reasons[7] and "epoch 8 of 10" in reasons[7]
    assert all(model.family.epoch_start(e, 10, 0) is None for e in range(10))  # close_mosaic=0: never
    outputs = _near_perfect(TARGETS, 4, seed=6)
    items = [model.family.compute_loss(outputs, TARGETS, LossContext(epoch=e, epochs=10, close_mosaic=3)).items
             for e in (6, 7, 9)]
    assert items[0][3] == 0 and items[1][3] > 0 and items[2][3] > 0
    never = model.family.compute_loss(outputs, TARGETS, LossContext(epoch=9, epochs=10, close_mosaic=0)).items
    assert never[3] == 0


@pytest.mark.parametrize("empty", [torch.zeros(0, 6), torch.zeros(0)])
def test_empty_targets_give_a_finite_loss_whose_gradient_reaches_every_parameter(empty):
    # What DDP needs (no find_unused_parameters): a box-free rank still grads every parameter.
    torch.manual_seed(0)
    net = YoloxNet("n", nc=NC)
    loss, items = YoloxLoss(NC)(net.raw_outputs(torch.rand(2, 3, 64, 64)), empty, use_l1=True)
    loss.backward()
    assert torch.isfinite(loss) and loss > 0
    assert items[0] == 0 and items[2] == 0 and items[3] == 0 and items[1] > 0
    assert [n for n, p in net.named_parameters() if p.grad is None] == []
    assert all(torch.isfinite(p.grad).all() for p in net.parameters())
    assert all((p.grad == 0).all() for p in net.head.cls_preds.parameters())  # connected, weight zero


def test_an_empty_image_in_a_batch_adds_only_its_objectness_loss():
    targets = TARGETS[TARGETS[:, 0] == 0]  # image 0 has boxes, image 1 has none
    outputs = _random_outputs(2, seed=7)
    loss_fn = YoloxLoss(NC)
    both, both_items = loss_fn(outputs, targets, use_l1=True, **PLAIN_SUMS)
    first, first_items = loss_fn([o[:1] for o in outputs], targets, use_l1=True, **PLAIN_SUMS)
    second, second_items = loss_fn([o[1:] for o in outputs], targets[:0], use_l1=True, **PLAIN_SUMS)
    assert second_items[[0, 2, 3]].eq(0).all() and second_items[1] > 0
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    expected_obj = sum(bce(o[1:, 4], torch.zeros_like(o[1:, 4]), reduction="sum") for o in outputs)
    torch.testing.assert_close(second_items[1], expected_obj)
    torch.testing.assert_close(both_items, first_items + second_items)
    torch.testing.assert_close(both, first + second)


def test_images_with_0_1_and_30_boxes_sum_to_their_losses_alone():
    gen = torch.Generator().manual_seed(9)
    rows = [torch.zeros(0, 6)]
    rows.append(torch.tensor([[1, 2, 0.5, 0.5, 0.3, 0.4]]))
    xy, wh = torch.rand(30, 2, generator=gen) * 0.8 + 0.1, torch.rand(30, 2, generator=gen) * 0.3 + 0.05
    rows.append(torch.cat((torch.full((30, 1), 2.0), torch.randint(0, NC, (30, 1), generator=gen).float(), xy, wh), 1))
    targets = torch.cat(rows)
    outputs = leaves(_random_outputs(3, seed=8))
    loss_fn = YoloxLoss(NC)
    total, items = loss_fn(outputs, targets, use_l1=True, **PLAIN_SUMS)
    total.backward()
    assert torch.isfinite(total) and all(torch.isfinite(o.grad).all() for o in outputs)
    per_image = []
    for i in range(3):
        mine = targets[targets[:, 0] == i].clone()
        mine[:, 0] = 0
        per_image.append(loss_fn([o[i:i + 1].detach() for o in outputs], mine, use_l1=True, **PLAIN_SUMS)[1])
    assert per_image[0][[0, 2, 3]].eq(0).all() and (per_image[2] > per_image[1]).all()
    torch.testing.assert_close(items, sum(per_image))


@pytest.mark.parametrize("case", ["boxes_on_both_ranks", "all_background_rank"])
def test_two_ranks_at_half_batch_average_to_the_one_process_gradient(case):
    targets = TARGETS if case == "boxes_on_both_ranks" else TARGETS[TARGETS[:, 0] < 2]
    full = leaves(_near_perfect(targets, 4, seed=11))
    assert_two_ranks_average_to_one_process(YoloxLoss(NC), full, targets, background_rank=case == "all_background_rank",
                                            use_l1=True)


def test_loss_scales_with_global_batch_and_items_with_world_size():
    outputs = _random_outputs(2, seed=4)
    loss_fn = YoloxLoss(NC)
    base, base_items = loss_fn(outputs, TARGETS[:2])
    torch.testing.assert_close(base, base_items.sum() * 2)  # default global batch: B * world_size
    scaled, scaled_items = loss_fn(outputs, TARGETS[:2], world_size=4, global_batch=32)
    torch.testing.assert_close(scaled_items, base_items * 4)
    torch.testing.assert_close(scaled, base_items.sum() * 4 * 32)


def test_gains_reach_the_loss_through_the_family():
    model = LibreYOLOX(size="n", nc=NC)
    outputs = _near_perfect(TARGETS, 4, seed=12)
    ctx = LossContext(epoch=9, epochs=10, close_mosaic=2)
    base = model.family.compute_loss(outputs, TARGETS, ctx).items
    changed = model.family.compute_loss(outputs, TARGETS, LossContext(epoch=9, epochs=10, close_mosaic=2,
                                                                      gains={"iou": 10.0, "l1": 0.0})).items
    torch.testing.assert_close(changed[0], base[0] * 2)
    assert changed[3] == 0 and base[3] > 0
    torch.testing.assert_close(changed[1:3], base[1:3])


def test_wrong_channel_count_names_the_level_and_nc():
    outputs = _random_outputs(1)
    outputs[1] = outputs[1][:, :-1]
    with pytest.raises(ValueError, match=r"head output 1 has shape \(1, 7, 4, 4\); expected \[1, 8.*nc=3"):
        YoloxLoss(NC)(outputs, TARGETS[:1])
    with pytest.raises(ValueError, match=r"got 2 head outputs for strides \(8, 16, 32\)"):
        YoloxLoss(NC)(_random_outputs(1)[:2], TARGETS[:1])


def test_a_class_id_outside_nc_names_the_row():
    bad = torch.tensor([[0, 1, 0.5, 0.5, 0.2, 0.2], [0, 3, 0.5, 0.5, 0.2, 0.2]])
    with pytest.raises(ValueError, match=r"row 1 has class 3 but nc=3"):
        YoloxLoss(NC)(_random_outputs(1), bad)


@pytest.mark.parametrize(("kwargs", "match"), [({"nc": 0}, "nc=0"), ({"strides": ()}, r"strides=\(\)")])
def test_bad_loss_settings_are_rejected_with_the_value(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        YoloxLoss(**{"nc": NC, **kwargs})


SMALL_BOXES = torch.tensor([[0, 1, 0.30, 0.30, 0.20, 0.20],
                            [0, 2, 0.75, 0.70, 0.18, 0.22],
                            [1, 0, 0.50, 0.50, 0.20, 0.20]])


@pytest.mark.cuda
@pytest.mark.parametrize("targets_on", ["cpu", "cuda"])
def test_cuda_loss_and_gradients_match_the_cpu_ones(targets_on):
    cpu_outputs = leaves(_near_perfect(SMALL_BOXES, 2, seed=21))
    gpu_outputs = [o.detach().cuda().requires_grad_() for o in cpu_outputs]
    loss_fn = YoloxLoss(NC)
    cpu_loss, cpu_items = loss_fn(cpu_outputs, SMALL_BOXES, use_l1=True)
    cpu_loss.backward()
    gpu_loss, gpu_items = loss_fn(gpu_outputs, SMALL_BOXES.to(targets_on), use_l1=True)
    gpu_loss.backward()
    assert gpu_loss.device.type == "cuda" and cpu_items[0] > 0.01
    torch.testing.assert_close(gpu_items.cpu(), cpu_items, rtol=1e-4, atol=1e-6)
    for cpu, gpu in zip(cpu_outputs, gpu_outputs):
        torch.testing.assert_close(gpu.grad.cpu(), cpu.grad, rtol=1e-3, atol=1e-5 * cpu.grad.abs().max().item())


@pytest.mark.cuda
@pytest.mark.parametrize("targets_on", ["cpu", "cuda"])
def test_cuda_loss_forward_never_makes_the_host_wait_for_the_device(targets_on):
    outputs = [o.cuda().requires_grad_() for o in _near_perfect(SMALL_BOXES, 2, seed=22)]
    targets = SMALL_BOXES.to(targets_on)
    loss_fn = YoloxLoss(NC)
    expected, _ = loss_fn(outputs, targets, use_l1=True)  # warm-up: allocator and pinned-memory pools
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")  # any synchronizing CUDA call raises
    try:
        loss, _ = loss_fn(outputs, targets, use_l1=True)
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    torch.testing.assert_close(loss, expected)
