"""EC's pose and segment networks against upstream (the tasks themselves come with the task
structure): layouts of every size, the fill checksums, size s's outputs at 320 px, and the
training outputs the losses will read.

README 8.6 calls both badly conditioned: pose logits carry float32 noise of 55 at magnitude 120
(keypoints 0.13), segment masks 2.2 at magnitude 9e3. Pose is therefore run in float64 here and
compared with upstream's float32 outputs within that noise (our float64 vs their float32 measures
54.7 and 0.129, the README's own float32-vs-float64 figures); segment's logits and boxes are
healthy (1e-2, 1e-3) and its masks a smoke test (8 queries, within 5).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from upstream_fill import DATA, layout_rows, read_manifest
from upstream_fill_table import check_fill_checksums, fill_from_table

from libreyolo_models.families.ec.nn import ECNet, ECPoseNet
from libreyolo_models.families.ec.variants import VARIANTS


@pytest.mark.parametrize("size", list(VARIANTS))
@pytest.mark.parametrize("task", ["segment", "pose"])
def test_state_dict_layout_matches_upstream_manifest(task: str, size: str) -> None:
    header, rows = read_manifest(f"ec-{size}-{task}")
    with torch.device("meta"):
        net = ECPoseNet(size) if task == "pose" else ECNet(size, nc=80, task="segment")
    assert layout_rows(net) == rows
    assert sum(p.numel() for p in net.parameters()) == header["params"]


@pytest.mark.parametrize("task", ["segment", "pose"])
def test_hash_fill_reproduces_upstream_checksums(task: str) -> None:
    net = ECPoseNet("s", imgsz=(320, 320)) if task == "pose" else ECNet("s", 80, imgsz=(320, 320), task="segment")
    fill_from_table(net, f"ec-s-{task}")
    check_fill_checksums(net, f"ec-s-{task}", every=4)


def _order(scores: torch.Tensor, ref: np.lib.npyio.NpzFile, k: int) -> torch.Tensor:
    """Our rows in upstream's top-k order (the selected token sets must agree)."""
    ours = scores.topk(k, dim=1).indices[0].tolist()
    theirs = torch.from_numpy(ref["aux_topk_index"])[0].tolist()
    assert set(ours) == set(theirs)
    row_of = {token: row for row, token in enumerate(ours)}
    return torch.tensor([row_of[t] for t in theirs])


def test_segment_forward_matches_upstream_hash_vectors() -> None:
    ref = np.load(DATA / "vectors-ec-s-segment-hash-reduced.npz", allow_pickle=False)
    net = ECNet("s", 80, imgsz=(320, 320), task="segment").eval()
    fill_from_table(net, "ec-s-segment")
    scores: list[torch.Tensor] = []
    net.decoder.enc_score_head.register_forward_hook(lambda m, i, o: scores.append(o.max(-1).values))
    with torch.no_grad():
        out = net.upstream_outputs(torch.from_numpy(ref["input"]))
    order = _order(scores[0], ref, 300)
    torch.testing.assert_close(out["pred_logits"][0, order], torch.from_numpy(ref["out0"])[0], rtol=0, atol=1e-2)
    torch.testing.assert_close(out["pred_boxes"][0, order], torch.from_numpy(ref["out1"])[0], rtol=0, atol=1e-3)
    assert out["pred_masks"].shape == (1, 300, 80, 80)
    torch.testing.assert_close(out["pred_masks"][0, order[:8]], torch.from_numpy(ref["out2"])[0], rtol=0, atol=5.0)


def test_pose_forward_in_float64_is_within_upstreams_float32_noise() -> None:
    ref = np.load(DATA / "vectors-ec-s-pose-hash.npz", allow_pickle=False)
    assert list(ref["out_names"]) == ["pred_logits", "pred_keypoints"]
    net = ECPoseNet("s", imgsz=(320, 320)).eval()
    fill_from_table(net, "ec-s-pose")
    scores: list[torch.Tensor] = []
    net.decoder.enc_out_class_embed.register_forward_hook(lambda m, i, o: scores.append(o.max(-1).values))
    net.double()
    with torch.no_grad():
        out = net.upstream_outputs(torch.from_numpy(ref["input"]).double())
    torch.testing.assert_close(scores[0].float(), torch.from_numpy(ref["aux_enc_score_max"]), rtol=0, atol=1e-4)
    order = _order(scores[0], ref, 60)
    assert out["pred_logits"].shape == (1, 60, 2) and out["pred_keypoints"].shape == (1, 60, 34)
    logits, keypoints = out["pred_logits"][0, order].float(), out["pred_keypoints"][0, order].float()
    torch.testing.assert_close(logits, torch.from_numpy(ref["out0"])[0], rtol=0, atol=60.0)
    torch.testing.assert_close(keypoints, torch.from_numpy(ref["out1"])[0], rtol=0, atol=0.15)


def test_segment_training_outputs_carry_mask_factors_for_every_layer() -> None:
    from libreyolo_models.layers.detr.denoising import build_denoising
    from libreyolo_models.layers.set_targets import group_targets

    torch.manual_seed(0)
    net = ECNet("s", 3, imgsz=(64, 64), task="segment").train()
    feats = net.features(torch.rand(2, 3, 64, 64))
    dn = build_denoising(group_targets(torch.tensor([[0, 1, 0.5, 0.5, 0.3, 0.3]]), 2, 3), 3, 84)
    out = net.forward_train(feats, dn)
    assert out["mask_pixels"].shape == (4, 2, 192, 16, 16)            # 4 layers, stride 4
    assert out["mask_queries"].shape == (4, 2, 84, 192) and out["dn_mask_queries"].shape == (4, 2, dn.num_queries, 192)
    masks = torch.einsum("lbchw,lbqc->lbqhw", out["mask_pixels"], out["mask_queries"]) + out["mask_bias"]
    assert masks.shape == (4, 2, 84, 16, 16) and torch.isfinite(masks).all()
    eval_out = net.eval()(torch.rand(1, 3, 64, 64))
    assert eval_out["pred_masks"].shape == (1, 84, 16, 16)


def test_pose_training_outputs_cover_every_layer_and_reach_every_trained_parameter() -> None:
    torch.manual_seed(0)
    net = ECPoseNet("s", imgsz=(64, 64)).train()
    out = net.forward_train(net.features(torch.rand(2, 3, 64, 64)))
    assert out["logits"].shape == (3, 2, 60, 2) and out["keypoints"].shape == (3, 2, 60, 17, 2)
    assert out["corners"].shape == (3, 2, 60, 17, 66) and out["enc_keypoints"].shape == (2, 60, 17, 2)
    loss = sum(v.float().sum() for k, v in out.items() if k not in ("up", "reg_scale"))
    loss.backward()
    missing = {n.split(".")[1] for n, p in net.named_parameters() if p.requires_grad and p.grad is None}
    assert missing == {"label_enc", "pose_enc"}  # the denoising embeddings: used only with denoising queries


def test_pose_denoising_queries_copy_each_person_and_reach_its_embeddings() -> None:
    """Two images with 1 and 2 persons: 40 // 4 = 10 groups of (2 positives + 2 negatives) slots;
    a positive copy's visible keypoints move by at most sqrt(2 ln 2) OKS sigmas, invisible ones
    and the centre (the box centre) not at all."""
    from libreyolo_models.families.ec.pose_denoising import COCO_SIGMAS, build_pose_denoising

    torch.manual_seed(0)
    keypoints = torch.rand(3, 17, 3) * 0.5 + 0.25
    keypoints[..., 2] = 2.0
    keypoints[1, 3, 2] = 0.0  # person 1's 4th keypoint unlabelled
    boxes = torch.tensor([[0.2, 0.2, 0.6, 0.8], [0.1, 0.1, 0.5, 0.5], [0.5, 0.4, 0.9, 0.9]])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    dn = build_pose_denoising(torch.zeros(3, dtype=torch.int64), boxes, keypoints, areas, (1, 2), (64, 64), 60,
                              label_noise_ratio=0.0)
    assert (dn.groups, dn.max_persons, dn.num_queries) == (10, 2, 40)
    assert dn.valid.sum().item() == 3 * 2 * 10 and dn.attn_mask is not None and dn.attn_mask.shape == (100, 100)
    points = dn.points_unact.sigmoid()
    first = points[1, 0]                      # image 1's first person, group 0's positive copy
    torch.testing.assert_close(first[0], (boxes[1, :2] + boxes[1, 2:]) / 2)          # the centre stays
    torch.testing.assert_close(first[4], keypoints[1, 3, :2])                          # unlabelled: stays
    limit = torch.sqrt(2 * torch.log(torch.tensor(2.0)) * 2 * areas[1] * 64 * 64 * (2 * COCO_SIGMAS[0] / 10) ** 2) / 64
    assert (first[1] - keypoints[1, 0, :2]).norm() <= limit + 1e-5
    net = ECPoseNet("s", imgsz=(64, 64)).train()
    out = net.forward_train(net.features(torch.rand(2, 3, 64, 64)), dn)
    assert out["dn_logits"].shape == (3, 2, 40, 2) and out["logits"].shape == (3, 2, 60, 2)
    (out["dn_logits"].sum() + out["logits"].sum()).backward()
    assert net.decoder.label_enc.weight.grad is not None and net.decoder.pose_enc.weight.grad is not None


@pytest.mark.parametrize("task", ["detect", "segment", "pose"])
def test_weights_of_another_image_size_load_keeping_this_networks_anchors(task: str) -> None:
    """A run trained at 640 px and validated at 64 px (or the reverse) loads the other size's
    weights: the anchor buffers are derived from the size, so each network keeps its own."""
    torch.manual_seed(0)
    make = (lambda size: ECPoseNet("s", imgsz=(size, size))) if task == "pose" else (
        lambda size: ECNet("s", nc=3, imgsz=(size, size), task=task))
    big, small = make(128), make(64)
    own = small.decoder.anchors.clone()
    small.load_state_dict(big.state_dict())
    assert torch.equal(small.decoder.anchors, own) and small.decoder.anchors.shape != big.decoder.anchors.shape
    big.load_state_dict(small.state_dict())
    weight = next(k for k in big.state_dict() if k.endswith(".weight"))
    assert torch.equal(big.state_dict()[weight], small.state_dict()[weight])
