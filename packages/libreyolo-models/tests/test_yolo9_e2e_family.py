"""YOLOv9-E2E through the facade and on its own: names, the dual head's seams, NMS-free top-k
prediction (hand-worked), the dual loss (hand-worked cases, two-rank identity), learning,
checkpoints and fusing."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from loss_falls import train_steps
from rank_pairs import assert_two_ranks_match_one_process

from libreyolo_models import SAMPLE_IMAGE, CheckpointError, LibreYOLO, LibreYOLO9, LibreYOLO9E2E, Results
from libreyolo_models.families.yolo9_e2e.family import Yolo9E2EFamily
from libreyolo_models.families.yolo9_e2e.loss import Yolo9E2ELoss
from libreyolo_models.families.yolo9_e2e.nn import Yolo9E2ENet
from libreyolo_models.families.yolo9_e2e.postprocess import postprocess
from libreyolo_models.layers.assign import TaskAlignedAssigner
from libreyolo_models.layers.dfl_loss import TaskAlignedDFLLoss
from libreyolo_models.zoo.registry import get_family, parse_model_name

NC = 3
TARGETS = torch.tensor([[0, 0, 0.30, 0.30, 0.30, 0.25],
                        [0, 2, 0.70, 0.60, 0.20, 0.30],
                        [1, 1, 0.50, 0.50, 0.50, 0.40]])


def _outputs(batch: int, seed: int = 0, size: int = 64) -> dict[str, list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    maps = lambda: [torch.randn(batch, 64 + NC, size // s, size // s, generator=gen).requires_grad_()  # noqa: E731
                    for s in (8, 16, 32)]
    return {"one2many": maps(), "one2one": maps()}


def test_names_resolve_to_the_e2e_family_not_yolov9() -> None:
    parsed = parse_model_name("LibreYOLO9E2Es.pt")
    assert (parsed.family.name, parsed.size, parsed.task) == ("yolo9_e2e", "s", "detect")
    assert parse_model_name("LibreYOLO9s.pt").family.name == "yolo9"
    model = LibreYOLO("LibreYOLO9E2Et.yaml")
    assert (model.spec.name, model.size, model.imgsz, model.nc) == ("yolo9_e2e", "t", 640, 80)


def test_spec_pins_sync_bn_autospawn_and_no_unverified_graphs() -> None:
    spec = get_family("yolo9_e2e")
    decl = spec.task("detect")
    assert spec.sync_bn_default and spec.ddp_autospawn
    assert decl.inference_capture and decl.train_capture  # parity row and certificate, H200 2026-12-05
    assert decl.loss_names == ("box", "cls", "dfl") and dict(decl.loss_gains) == {"box": 7.5, "cls": 0.5, "dfl": 1.5}


def test_bare_state_dict_tells_size_and_classes_and_a_yolov9_one_is_named() -> None:
    state = Yolo9E2ENet("s", nc=7).state_dict()
    assert Yolo9E2EFamily.infer_size(state, "detect") == "s"
    assert Yolo9E2EFamily.infer_nc(state, "detect") == 7
    plain = LibreYOLO9(size="t", nc=7).net.state_dict()
    with pytest.raises(CheckpointError, match=r"one2one_cv3.*family='yolo9'"):
        Yolo9E2EFamily.infer_nc(plain, "detect")
    legacy = {("detect." + k[5:] if k.startswith("head.") else k): v for k, v in state.items()}
    assert list(Yolo9E2EFamily.remap_state(legacy)) == list(state)


def test_one_to_one_branch_starts_as_a_copy_of_the_dense_one() -> None:
    head = Yolo9E2ENet("t", nc=NC).head
    for dense, single in ((head.cv2, head.one2one_cv2), (head.cv3, head.one2one_cv3)):
        for (name, a), (_, b) in zip(dense.state_dict().items(), single.state_dict().items()):
            assert torch.equal(a, b), name


def test_training_seam_returns_both_branches_and_only_the_dense_one_trains_the_trunk() -> None:
    torch.manual_seed(0)
    net = Yolo9E2ENet("t", nc=NC).train()
    out = net.training_outputs(torch.rand(2, 3, 64, 64))
    assert set(out) == {"one2many", "one2one"}
    assert [tuple(m.shape) for m in out["one2one"]] == [(2, 64 + NC, 8, 8), (2, 64 + NC, 4, 4), (2, 64 + NC, 2, 2)]
    sum(m.sum() for m in out["one2one"]).backward()
    assert all(p.grad is None for p in net.backbone.parameters())  # features reach one2one detached
    assert all(p.grad is None for p in net.head.cv3.parameters())
    assert all(p.grad is not None for p in net.head.one2one_cv3.parameters())


def _predictions() -> torch.Tensor:
    """One image, nc=2, four anchors: a0 and a1 overlap heavily (IoU 0.68), a2 apart, a3 faint."""
    boxes = torch.tensor([[0, 0, 10, 10], [1, 1, 11, 11], [50, 50, 60, 60], [0, 0, 5, 5]], dtype=torch.float32)
    scores = torch.tensor([[0.9, 0.1], [0.8, 0.7], [0.2, 0.3], [0.05, 0.01]])
    return torch.cat((boxes, scores), 1).t()[None]


def test_top_k_keeps_overlapping_boxes_no_nms_best_first() -> None:
    (det,) = postprocess(_predictions(), conf=0.25, max_det=10)
    expected = torch.tensor([[0, 0, 10, 10, 0.9, 0], [1, 1, 11, 11, 0.8, 0], [1, 1, 11, 11, 0.7, 1],
                             [50, 50, 60, 60, 0.3, 1]], dtype=torch.float32)
    torch.testing.assert_close(det, expected)


def test_top_k_caps_anchors_then_pairs_at_max_det_and_filters_classes() -> None:
    (two,) = postprocess(_predictions(), conf=0.0, max_det=2)  # anchors a0, a1, then their best pairs
    torch.testing.assert_close(two[:, 4:], torch.tensor([[0.9, 0.0], [0.8, 0.0]]))
    (only,) = postprocess(_predictions(), conf=0.25, max_det=10, classes=[1])
    torch.testing.assert_close(only[:, 4:], torch.tensor([[0.7, 1.0], [0.3, 1.0]]))


def test_top_k_on_a_batch_returns_one_tensor_per_image_even_when_empty() -> None:
    batch = torch.cat((_predictions(), _predictions() * torch.tensor([1, 1, 1, 1, 0, 0.0])[:, None]))
    first, second = postprocess(batch, conf=0.25, max_det=300)
    assert first.shape == (4, 6) and second.shape == (0, 6)


def test_one_candidate_assigner_gives_each_object_its_best_aligned_anchor_and_duplicates_one() -> None:
    anchors = torch.tensor([[4.0, 4.0], [12.0, 4.0], [20.0, 4.0], [28.0, 4.0]])
    pred = torch.tensor([[[0, 0, 8, 8], [2, 0, 16, 8], [16, 0, 24, 8], [24, 0, 32, 8]]], dtype=torch.float32)
    scores = torch.full((1, 4, 2), 0.5)
    gt = torch.tensor([[[0, 0, 16, 8], [16, 0, 32, 8]]], dtype=torch.float32)
    one = TaskAlignedAssigner(topk=1)(scores, pred, anchors, torch.tensor([[0, 1]]), gt, torch.ones(1, 2, dtype=bool))
    # Object 0 holds anchors 0 and 1; anchor 1's box overlaps it most. Object 1 holds 2 and 3 (tied: first).
    assert one.foreground.tolist() == [[False, True, True, False]]
    assert one.gt_index[0, 1] == 0 and one.gt_index[0, 2] == 1
    many = TaskAlignedAssigner(topk=10)(scores, pred, anchors, torch.tensor([[0, 1]]), gt, torch.ones(1, 2, dtype=bool))
    assert many.foreground.sum() == 4
    twice = TaskAlignedAssigner(topk=1)(scores, pred, anchors, torch.tensor([[0, 0]]), gt[:, :1].repeat(1, 2, 1),
                                        torch.ones(1, 2, dtype=bool))
    assert twice.foreground.sum() == 1  # a duplicated object: one anchor between both copies


def test_dual_loss_is_each_branch_normalised_alone_then_summed() -> None:
    outputs = _outputs(2, seed=1)
    loss, items = Yolo9E2ELoss(NC)(outputs, TARGETS[:2])
    _, many = TaskAlignedDFLLoss(NC, topk=10)(outputs["one2many"], TARGETS[:2])
    _, one = TaskAlignedDFLLoss(NC, topk=1)(outputs["one2one"], TARGETS[:2])
    torch.testing.assert_close(items, many + one)
    torch.testing.assert_close(loss, (many + one).sum() * 2)  # x global batch (B * world size)


def test_no_boxes_gives_finite_loss_background_only_and_gradients_everywhere() -> None:
    outputs = _outputs(2, seed=2)
    loss, items = Yolo9E2ELoss(NC)(outputs, torch.zeros(0, 6))
    loss.backward()
    assert torch.isfinite(loss) and items[0] == 0 and items[2] == 0 and items[1] > 0
    assert all(m.grad is not None and torch.isfinite(m.grad).all() for maps in outputs.values() for m in maps)


def test_an_image_with_five_boxes_beside_an_empty_one_adds_up_per_image() -> None:
    many = torch.tensor([[0, i % NC, 0.15 + 0.17 * i, 0.5, 0.12, 0.3] for i in range(5)])
    outputs = _outputs(2, seed=3)
    plain = {"normalizer_sum": torch.ones_like, "global_batch": 1}  # every normaliser := 1: plain sums
    loss_fn = Yolo9E2ELoss(NC)
    both, both_items = loss_fn(outputs, many, **plain)
    first, first_items = loss_fn({k: [m[:1] for m in v] for k, v in outputs.items()}, many, **plain)
    second, second_items = loss_fn({k: [m[1:] for m in v] for k, v in outputs.items()}, many[:0], **plain)
    torch.testing.assert_close(both_items, first_items + second_items)
    torch.testing.assert_close(both, first + second)


def test_two_ranks_at_half_batch_average_to_the_one_process_gradient() -> None:
    targets = torch.cat((TARGETS, TARGETS[:1] + torch.tensor([2, 0, 0, 0, 0, 0]),
                         TARGETS[2:] + torch.tensor([2, 0, 0, 0, 0, 0])))
    assert_two_ranks_match_one_process(Yolo9E2ELoss(NC), _outputs(4, seed=4), targets, normalizers=2)


def test_a_missing_branch_is_named() -> None:
    with pytest.raises(ValueError, match=r"lack \['one2one'\].*training_outputs"):
        Yolo9E2ELoss(NC)({"one2many": _outputs(1)["one2many"]}, TARGETS[:0])


def test_loss_falls_over_20_steps() -> None:
    """After 10 settling steps (the task-aligned normaliser starts clamped at 1, so the first losses
    rise while the network starts to detect: see loss_falls). Measured (seeds 0-2): the mean of the
    last five steps is 0.66-0.73 of the first five's."""
    torch.manual_seed(0)
    history = torch.stack(train_steps(LibreYOLO9E2E(size="t", nc=NC), warmup=10)).sum(1)
    assert history[-5:].mean() < 0.85 * history[:5].mean(), history.tolist()


@pytest.fixture(scope="module")
def model() -> LibreYOLO:
    torch.manual_seed(0)
    m = LibreYOLO9E2E(size="t", nc=3, names=["circle", "square", "triangle"], imgsz=64)
    with torch.no_grad():  # spread the class priors so top-k has something above conf
        for conv in m.net.head.one2one_cv3:
            conv[-1].bias.copy_(torch.tensor([0.3, -0.2, 0.1]))
    return m.eval()


def test_predict_returns_results_like_every_detector(model: LibreYOLO) -> None:
    (res,) = model(SAMPLE_IMAGE, conf=0.3, max_det=20)
    assert isinstance(res, Results) and res.orig_shape == (360, 480) and 0 < len(res) <= 20
    scores = res.boxes.data[:, 4]
    assert torch.equal(scores, scores.sort(descending=True).values)


def test_checkpoint_round_trip_gives_the_same_predictions(model: LibreYOLO, tmp_path: Path) -> None:
    path = model.save(tmp_path / "e2e.pt")
    ckpt = torch.load(path, weights_only=True)
    assert (ckpt["model_family"], ckpt["size"], ckpt["nc"]) == ("yolo9_e2e", "t", 3)
    loaded = LibreYOLO(path)
    assert (loaded.spec.name, loaded.names[1]) == ("yolo9_e2e", "square")
    before = model(SAMPLE_IMAGE, conf=0.3, max_det=20)[0].boxes.data
    assert torch.equal(before, loaded.eval()(SAMPLE_IMAGE, conf=0.3, max_det=20)[0].boxes.data)


def test_fused_network_predicts_what_the_unfused_one_does(model: LibreYOLO) -> None:
    plain = model(SAMPLE_IMAGE, conf=0.3, max_det=20, fuse=False)[0].boxes.data
    fused = model(SAMPLE_IMAGE, conf=0.3, max_det=20, fuse=True)[0].boxes.data
    assert model.fused and len(plain) == len(fused) > 0
    torch.testing.assert_close(fused, plain, rtol=1e-4, atol=1e-3)
