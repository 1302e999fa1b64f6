"""YOLOv9 loss: learning signal, empty batches, and the 1-vs-2-rank gradient identity (CPU)."""

from __future__ import annotations

import pytest
import torch
from rank_split import assert_two_ranks_average_to_one_process
from torch import nn

from libreyolo_models.errors import ConfigError
from libreyolo_models.families.yolo9.loss import Yolo9Loss
from libreyolo_models.families.yolo9.nn import Yolo9Net

NC = 3
REG_MAX = 16
STRIDES = (8, 16, 32)
NO = 4 * REG_MAX + NC


def _random_outputs(batch: int, hw=(64, 64), seed: int = 0, scale: float = 1.0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, NO, hw[0] // s, hw[1] // s, generator=gen) * scale for s in STRIDES]


def _perfect_outputs(targets: torch.Tensor, batch: int, hw=(64, 64)) -> list[torch.Tensor]:
    """Raw outputs whose decoded box, at every anchor inside a target box, is exactly that box.

    Each side's distance d is encoded as the two-bin distribution (1 - frac, frac) around it, whose
    expectation is d; class logits favour the target's class.
    """
    height, width = hw
    outputs = []
    for s in STRIDES:
        gh, gw = height // s, width // s
        ys, xs = torch.meshgrid(torch.arange(gh) + 0.5, torch.arange(gw) + 0.5, indexing="ij")
        xs, ys = xs.reshape(-1), ys.reshape(-1)
        probs = torch.zeros(batch, 4, REG_MAX, gh * gw)
        probs[:, :, 0] = 1.0  # background anchors: distance 0
        cls = torch.full((batch, NC, gh * gw), -4.0)
        for image, c, cx, cy, bw, bh in targets.tolist():
            x1, x2 = (cx - bw / 2) * width / s, (cx + bw / 2) * width / s
            y1, y2 = (cy - bh / 2) * height / s, (cy + bh / 2) * height / s
            inside = (xs > x1) & (xs < x2) & (ys > y1) & (ys < y2)
            dist = torch.stack((xs - x1, ys - y1, x2 - xs, y2 - ys)).clamp(0, REG_MAX - 1.01)
            lower = dist.floor().long()
            frac = dist - lower
            two_hot = torch.zeros(4, REG_MAX, gh * gw)
            two_hot.scatter_(1, lower[:, None], (1 - frac)[:, None])
            two_hot.scatter_(1, lower[:, None] + 1, frac[:, None])
            probs[int(image)][:, :, inside] = two_hot[:, :, inside]
            cls[int(image), int(c), inside] = 4.0
        box = probs.clamp_min(1e-12).log().reshape(batch, 4 * REG_MAX, gh, gw)
        outputs.append(torch.cat((box, cls.reshape(batch, NC, gh, gw)), 1))
    return outputs


def _leaves(outputs: list[torch.Tensor]) -> list[torch.Tensor]:
    return [o.detach().clone().requires_grad_() for o in outputs]


TARGETS = torch.tensor([  # (image, class, cx, cy, w, h), normalized
    [0, 1, 0.30, 0.35, 0.30, 0.40],
    [0, 2, 0.75, 0.70, 0.35, 0.30],
    [1, 0, 0.50, 0.55, 0.45, 0.50],
    [3, 2, 0.40, 0.60, 0.25, 0.30],
])


@pytest.mark.parametrize("hw", [(64, 64), (64, 96)])
def test_perfect_box_predictions_give_near_zero_box_loss(hw):
    targets = torch.tensor([[0, 1, 0.40, 0.45, 0.30, 0.35], [1, 2, 0.55, 0.50, 0.40, 0.30]])
    loss_fn = Yolo9Loss(NC)
    _, perfect = loss_fn(_perfect_outputs(targets, 2, hw), targets)
    _, random = loss_fn(_random_outputs(2, hw), targets)
    assert perfect[0].item() < 1e-4
    assert random[0].item() > 0.1  # random boxes are far off: the check means something


def test_loss_decreases_when_predictions_move_toward_the_targets():
    targets = TARGETS[TARGETS[:, 0] < 2]
    loss_fn = Yolo9Loss(NC)
    perfect = _perfect_outputs(targets, 2)
    noise = _random_outputs(2, seed=3)
    history = []
    for t in (0.0, 0.5, 0.8, 1.0):  # walk the raw outputs from noise to the perfect encoding
        loss, items = loss_fn([(1 - t) * n + t * p for n, p in zip(noise, perfect)], targets)
        history.append((loss.item(), items[0].item(), items[2].item()))
    totals, boxes = [h[0] for h in history], [h[1] for h in history]
    assert totals == sorted(totals, reverse=True), history
    assert boxes == sorted(boxes, reverse=True), history
    # DFL is a cross-entropy against a two-bin target, minimal at the encoding, not along the path:
    # only the end points are comparable.
    assert history[-1][2] < history[0][2], history


def test_gradient_steps_on_the_outputs_reduce_every_term():
    targets = TARGETS[TARGETS[:, 0] < 2]
    loss_fn = Yolo9Loss(NC)
    outputs = _leaves(_random_outputs(2, seed=5))
    optimizer = torch.optim.Adam(outputs, lr=0.1)
    first = None
    for _ in range(40):
        optimizer.zero_grad()
        loss, items = loss_fn(outputs, targets)
        first = items if first is None else first
        loss.backward()
        optimizer.step()
    _, last = loss_fn(outputs, targets)
    assert (last < 0.6 * first).all(), (first, last)  # measured: box 0.17, cls 0.02, dfl 0.47


class _TinyDetector(nn.Module):
    """Stand-in network: a shared trunk, then separate box and class branches per level (like YOLOv9)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 4, 1), nn.BatchNorm2d(8), nn.SiLU())  # stride 4
        self.down = nn.ModuleList(nn.Conv2d(8, 8, 3, 2, 1) for _ in STRIDES)  # strides 8, 16, 32
        self.box = nn.ModuleList(nn.Conv2d(8, 4 * REG_MAX, 1) for _ in STRIDES)
        self.cls = nn.ModuleList(nn.Conv2d(8, NC, 1) for _ in STRIDES)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        x, outputs = self.stem(x), []
        for down, box, cls in zip(self.down, self.box, self.cls):
            x = down(x)
            outputs.append(torch.cat((box(x), cls(x)), 1))
        return outputs


@pytest.mark.parametrize("empty", [torch.zeros(0, 6), torch.zeros(0)])
def test_empty_targets_give_a_finite_loss_whose_gradient_reaches_every_parameter(empty):
    torch.manual_seed(0)
    net = _TinyDetector()
    outputs = net(torch.randn(2, 3, 64, 64))
    for out in outputs:
        out.retain_grad()
    loss, items = Yolo9Loss(NC)(outputs, empty)
    loss.backward()
    assert torch.isfinite(loss) and loss > 0
    assert items[0] == 0 and items[2] == 0 and items[1] > 0
    for name, param in net.named_parameters():
        assert param.grad is not None, name
        assert torch.isfinite(param.grad).all(), name
    # Box branches are connected through zero-weighted terms: present, finite and exactly zero.
    assert all((p.grad == 0).all() for p in net.box.parameters())
    assert all(out.grad is not None for out in outputs)


def test_empty_targets_reach_every_parameter_of_the_real_yolo9_network():
    # What DDP needs (no find_unused_parameters): a box-free rank still grads every parameter.
    torch.manual_seed(0)
    net = Yolo9Net("t", nc=NC)
    loss, _ = Yolo9Loss(NC)(net.raw_outputs(torch.rand(1, 3, 64, 64)), torch.zeros(0, 6))
    loss.backward()
    assert [n for n, p in net.named_parameters() if p.grad is None] == []
    assert all(torch.isfinite(p.grad).all() for p in net.parameters())


def test_an_empty_image_in_a_batch_adds_only_its_background_classification_loss():
    targets = TARGETS[TARGETS[:, 0] == 0]  # image 0 has boxes, image 1 has none
    outputs = _random_outputs(2, seed=7)
    loss_fn = Yolo9Loss(NC)
    unnormalized = {"normalizer_sum": torch.ones_like, "global_batch": 1}  # N := 1: plain sums
    both, both_items = loss_fn(outputs, targets, **unnormalized)
    first, first_items = loss_fn([o[:1] for o in outputs], targets, **unnormalized)
    second, second_items = loss_fn([o[1:] for o in outputs], targets[:0], **unnormalized)
    assert second_items[0] == 0 and second_items[2] == 0 and second_items[1] > 0
    torch.testing.assert_close(both_items, first_items + second_items)
    torch.testing.assert_close(both, first + second)


@pytest.mark.parametrize("case", ["boxes_on_both_ranks", "all_background_rank"])
def test_two_ranks_at_half_batch_average_to_the_one_process_gradient(case):
    targets = TARGETS if case == "boxes_on_both_ranks" else TARGETS[TARGETS[:, 0] < 2]
    gen = torch.Generator().manual_seed(11)
    base = _perfect_outputs(targets, 4)  # near-perfect, so the normalizer is well above 1
    full = _leaves([p + 0.5 * torch.randn(p.shape, generator=gen) for p in base])
    assert_two_ranks_average_to_one_process(Yolo9Loss(NC), full, targets, background_rank=case == "all_background_rank")


def test_normalizer_is_clamped_to_one_only_after_the_cross_rank_sum():
    outputs = _random_outputs(1, seed=2)
    loss_fn = Yolo9Loss(NC)
    # An all-background rank: its own normalizer is 0, the other ranks' is 4, so N = 4 (clamping
    # before the reduce would give 1 + 4).
    _, alone = loss_fn(outputs, torch.zeros(0, 6))
    _, reduced = loss_fn(outputs, torch.zeros(0, 6), normalizer_sum=lambda n: n + 4.0)
    torch.testing.assert_close(reduced, alone / 4)
    # Below 1 after the reduce: clamped to 1.
    _, tiny = loss_fn(outputs, torch.zeros(0, 6), normalizer_sum=lambda n: n + 0.25)
    torch.testing.assert_close(tiny, alone)


def test_loss_scales_with_global_batch_and_items_with_world_size():
    outputs = _random_outputs(2, seed=4)
    loss_fn = Yolo9Loss(NC)
    base, base_items = loss_fn(outputs, TARGETS[:2])
    torch.testing.assert_close(base, base_items.sum() * 2)  # default global batch: B * world_size
    scaled, scaled_items = loss_fn(outputs, TARGETS[:2], world_size=4, global_batch=32)
    torch.testing.assert_close(scaled_items, base_items * 4)
    torch.testing.assert_close(scaled, base_items.sum() * 4 * 32)


def test_half_precision_outputs_give_a_float32_loss_and_gradients_in_their_own_dtype():
    outputs = [o.to(torch.bfloat16).requires_grad_() for o in _random_outputs(2, seed=8)]
    loss, items = Yolo9Loss(NC)(outputs, TARGETS[:2])
    loss.backward()
    assert loss.dtype == torch.float32 and items.dtype == torch.float32 and torch.isfinite(loss)
    assert all(o.grad.dtype == torch.bfloat16 and torch.isfinite(o.grad).all() for o in outputs)


def test_loss_holds_no_parameters_and_no_module_state():
    loss_fn = Yolo9Loss(NC)
    assert not isinstance(loss_fn, nn.Module)
    assert not any(isinstance(v, (nn.Parameter, nn.Module)) for v in vars(loss_fn).values())


def test_wrong_channel_count_names_the_level_and_nc():
    outputs = _random_outputs(1)
    with pytest.raises(ValueError, match=r"head output 0 has shape \(1, 67, 8, 8\); expected \[1, 69.*nc=5"):
        Yolo9Loss(5)(outputs, TARGETS[:0])


def test_wrong_number_of_levels_is_rejected():
    with pytest.raises(ValueError, match=r"got 2 head outputs for strides \(8, 16, 32\)"):
        Yolo9Loss(NC)(_random_outputs(1)[:2], TARGETS[:0])


def test_targets_with_the_wrong_layout_are_rejected():
    with pytest.raises(ValueError, match=r"targets has shape \(2, 5\); expected \[M, 6\]"):
        Yolo9Loss(NC)(_random_outputs(1), torch.zeros(2, 5))


def test_a_class_id_outside_nc_names_the_row():
    targets = torch.tensor([[0, 1, 0.5, 0.5, 0.2, 0.2], [0, 3, 0.5, 0.5, 0.2, 0.2]])
    with pytest.raises(ValueError, match=r"row 1 has class 3 but nc=3"):
        Yolo9Loss(NC)(_random_outputs(1), targets)


def test_a_normalizer_sum_that_returns_no_tensor_is_rejected():
    with pytest.raises(TypeError, match="normalizer_sum returned float"):
        Yolo9Loss(NC)(_random_outputs(1), TARGETS[:0], normalizer_sum=lambda n: 1.0)


@pytest.mark.parametrize(("kwargs", "match"), [({"world_size": 0}, "world_size=0"),
                                                ({"global_batch": 0}, "global_batch=0")])
def test_bad_scaling_arguments_are_rejected(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        Yolo9Loss(NC)(_random_outputs(1), TARGETS[:0], **kwargs)


@pytest.mark.parametrize(("kwargs", "match"), [({"nc": 0}, "nc=0"), ({"nc": 3, "reg_max": 1}, "reg_max=1"),
                                                ({"nc": 3, "strides": ()}, r"strides=\(\)"),
                                                ({"nc": 3, "topk": 0}, "topk=0")])
def test_bad_loss_settings_are_rejected_with_the_value(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        Yolo9Loss(**kwargs)


def _near_perfect(targets: torch.Tensor, batch: int, seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [p + 0.5 * torch.randn(p.shape, generator=gen) for p in _perfect_outputs(targets, batch)]


# Disjoint boxes small enough that fewer than topk=10 anchors (all levels) lie inside each: every
# inside anchor is a candidate and no anchor is contested, so the assignment cannot hinge on float
# rounding and CPU and CUDA must agree to rounding. Box edges are >= 0.1 px from every anchor.
SMALL_BOXES = torch.tensor([[0, 1, 0.30, 0.30, 0.20, 0.20],
                            [0, 2, 0.75, 0.70, 0.18, 0.22],
                            [1, 0, 0.50, 0.50, 0.20, 0.20]])


@pytest.mark.cuda
@pytest.mark.parametrize("targets_on", ["cpu", "cuda"])
def test_cuda_loss_and_gradients_match_the_cpu_ones(targets_on):
    cpu_outputs = _leaves(_near_perfect(SMALL_BOXES, 2, seed=21))
    gpu_outputs = [o.detach().cuda().requires_grad_() for o in cpu_outputs]
    loss_fn = Yolo9Loss(NC)
    cpu_loss, cpu_items = loss_fn(cpu_outputs, SMALL_BOXES)
    cpu_loss.backward()
    gpu_loss, gpu_items = loss_fn(gpu_outputs, SMALL_BOXES.to(targets_on))
    gpu_loss.backward()
    assert gpu_loss.device.type == "cuda" and gpu_items.device.type == "cuda"
    assert cpu_items[0] > 0.01  # boxes are being learned: the comparison covers every term
    torch.testing.assert_close(gpu_items.cpu(), cpu_items, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(gpu_loss.cpu(), cpu_loss, rtol=1e-4, atol=1e-6)
    for cpu, gpu in zip(cpu_outputs, gpu_outputs):
        torch.testing.assert_close(gpu.grad.cpu(), cpu.grad, rtol=1e-3, atol=1e-5 * cpu.grad.abs().max().item())


@pytest.mark.cuda
@pytest.mark.parametrize("targets_on", ["cpu", "cuda"])
def test_cuda_loss_forward_never_makes_the_host_wait_for_the_device(targets_on):
    outputs = [o.cuda().requires_grad_() for o in _near_perfect(SMALL_BOXES, 2, seed=22)]
    targets = SMALL_BOXES.to(targets_on)
    loss_fn = Yolo9Loss(NC)
    expected, _ = loss_fn(outputs, targets)  # warm-up: allocator and pinned-memory pools
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")  # any synchronizing CUDA call raises
    try:
        loss, _ = loss_fn(outputs, targets)
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    torch.testing.assert_close(loss, expected)
