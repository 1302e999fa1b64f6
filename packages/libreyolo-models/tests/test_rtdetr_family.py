"""RT-DETR through the facade: names, checkpoints, the seams, post-processing, optimizer groups,
the recipe, and what ``train(cuda_graph=True)`` says about the eager decoder."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from libreyolo_models import (
    SAMPLE_IMAGE,
    ConfigError,
    LibreRTDETR,
    LibreYOLO,
    LossContext,
    UnknownFamilyError,
)
from libreyolo_models.layers.set_postprocess import topk_detections
from libreyolo_models.zoo.registry import parse_model_name


@pytest.fixture(scope="module")
def model() -> LibreYOLO:
    torch.manual_seed(0)
    return LibreRTDETR(size="r18", nc=3, names=["a", "b", "c"], imgsz=128)


def test_weight_names_and_architecture_specs_resolve_to_rtdetr_sizes() -> None:
    parsed = parse_model_name("LibreRTDETRr50m.pt")
    assert (parsed.family.name, parsed.size, parsed.task) == ("rtdetr", "r50m", "detect")
    assert parse_model_name("LibreRTDETRl.yaml").size == "l"
    with pytest.raises(UnknownFamilyError, match=r"RT-DETR has no size 'r19'; sizes: r18, r34, r50, r50m, r101, l, x"):
        parse_model_name("LibreRTDETRr19.pt")


def test_checkpoint_round_trip_keeps_weights_metadata_and_predictions(model: LibreYOLO, tmp_path: Path) -> None:
    path = model.save(tmp_path / "LibreRTDETRr18.pt")
    ckpt = torch.load(path, weights_only=True)
    assert (ckpt["model_family"], ckpt["size"], ckpt["nc"], ckpt["imgsz"]) == ("rtdetr", "r18", 3, 128)
    again = LibreYOLO(path)
    assert (again.spec.name, again.size, again.names) == ("rtdetr", "r18", model.names)
    assert all(torch.equal(a, b) for a, b in zip(model.net.state_dict().values(), again.net.state_dict().values()))
    first = model(SAMPLE_IMAGE, conf=0.0, max_det=10)
    second = again(SAMPLE_IMAGE, conf=0.0, max_det=10)
    assert len(first[0]) == 10 and torch.equal(first[0].boxes.data, second[0].boxes.data)
    bare = tmp_path / "bare.pt"
    torch.save(model.net.state_dict(), bare)  # no metadata: size and nc come from the weights
    from_bare = LibreYOLO(bare, family="rtdetr")
    assert (from_bare.size, from_bare.nc) == ("r18", 3)


def test_inference_seam_returns_pixel_boxes_and_scores_for_every_query(model: LibreYOLO) -> None:
    model.net.eval()
    with torch.no_grad():
        out = model.inference_forward(torch.rand(2, 3, 128, 160))
        raw = model.net(torch.rand(2, 3, 128, 160))
    assert out.shape == (2, 300, 4 + 3)
    assert ((out[..., 4:] >= 0) & (out[..., 4:] <= 1)).all()
    assert (out[..., 2] >= out[..., 0]).all() and out[..., 2].max() <= 160 * 1.5
    assert set(raw) == {"pred_logits", "pred_boxes"}


def test_postprocess_ranks_query_class_pairs_without_nms() -> None:
    pred = torch.zeros(1, 3, 4 + 2)
    pred[0, :, :4] = torch.tensor([[0, 0, 10, 10], [0, 0, 10, 10], [5, 5, 20, 20]], dtype=torch.float32)
    pred[0, :, 4:] = torch.tensor([[0.9, 0.8], [0.7, 0.1], [0.2, 0.6]])
    det = topk_detections(pred, conf=0.5, max_det=10)[0]
    # Overlapping boxes both survive (no NMS) and query 0 reports two classes.
    assert det[:, 4].tolist() == pytest.approx([0.9, 0.8, 0.7, 0.6])
    assert det[:, 5].tolist() == [0, 1, 0, 1]
    assert det[3, :4].tolist() == [5, 5, 20, 20]
    assert len(topk_detections(pred, conf=0.5, max_det=2)[0]) == 2
    only_b = topk_detections(pred, conf=0.0, max_det=10, classes=[1])[0]
    assert set(only_b[:, 5].tolist()) == {1.0} and len(only_b) == 3


def test_too_small_an_image_names_the_smallest_usable_size() -> None:
    model = LibreRTDETR(size="r18", nc=3)
    with pytest.raises(ConfigError, match=r"selects 300 queries .* gives only 84; use imgsz >= 128"):
        model(SAMPLE_IMAGE, imgsz=64)


def test_compute_loss_needs_the_training_head_outputs(model: LibreYOLO) -> None:
    with pytest.raises(TypeError, match=r"call training_head\(net, training_forward"):
        model.family.compute_loss([torch.zeros(1)], torch.zeros(0, 6), LossContext(gains={}))


def test_training_head_then_loss_reach_every_trainable_parameter(model: LibreYOLO) -> None:
    """What DDP without find_unused_parameters needs, also for a batch without a single box."""
    net, family = model.net.train(), model.family
    gains = model.spec.task("detect").loss_gains
    for targets in (torch.tensor([[0, 1, 0.5, 0.5, 0.3, 0.3], [1, 2, 0.3, 0.6, 0.2, 0.4]]), torch.zeros(0, 6)):
        net.zero_grad(set_to_none=True)
        head = family.training_head(net, family.training_forward(net, torch.rand(2, 3, 128, 128)), targets)
        result = family.compute_loss(head, targets, LossContext(gains=gains))
        result.total.backward()
        missing = [n for n, p in net.named_parameters() if p.requires_grad and p.grad is None]
        assert not missing and result.items.shape == (3,) and torch.isfinite(result.total)


def test_parameter_groups_train_the_backbone_at_a_tenth_and_never_decay_norms_or_biases() -> None:
    net = LibreRTDETR(size="r18", nc=3).net
    groups = LibreRTDETR(size="r18", nc=3).family.parameter_groups(net, weight_decay=0.05)
    by_name = {g["group"]: g for g in groups}
    assert set(by_name) == {"backbone", "backbone_no_decay", "head", "head_no_decay"}
    assert by_name["backbone"]["lr_scale"] == by_name["backbone_no_decay"]["lr_scale"] == 0.1
    assert "lr_scale" not in by_name["head"] and by_name["head"]["weight_decay"] == 0.05
    names = {id(p): n for n, p in net.named_parameters()}
    seen = [names[id(p)] for g in groups for p in g["params"]]
    assert sorted(seen) == sorted(names.values())  # every parameter exactly once
    no_decay = {names[id(p)] for g in groups if g["weight_decay"] == 0 for p in g["params"]}
    assert "decoder.decoder.layers.0.self_attn.in_proj_bias" in no_decay
    assert "encoder.encoder.0.layers.0.norm1.weight" in no_decay and "backbone.conv1.conv1_1.norm.weight" in no_decay
    assert "decoder.denoising_class_embed.weight" not in no_decay


def test_the_recipe_is_the_official_one_and_the_user_still_wins() -> None:
    from libreyolo_models.train.plan import resolve_plan

    model = LibreRTDETR(size="r18", nc=3)
    plan = resolve_plan(model, {"data": "shapes", "device": "cpu"}, "test")
    cfg = plan.cfg
    assert (cfg.optimizer, cfg.lr0, cfg.lrf, cfg.weight_decay, cfg.momentum) == ("AdamW", 1e-4, 1.0, 1e-4, 0.9)
    assert (cfg.max_grad_norm, cfg.nbs, cfg.warmup_epochs, cfg.mosaic, cfg.epochs) == (0.1, 16, 0.0, 0.0, 72)
    assert plan.sync_bn is False and model.spec.ddp_autospawn
    assert plan.gains == {"vfl": 1.0, "bbox": 5.0, "giou": 2.0}
    mine = resolve_plan(model, {"data": "shapes", "device": "cpu", "lr0": 3e-4, "gains": {"giou": 1.0}}, "test")
    assert mine.cfg.lr0 == 3e-4 and mine.gains["giou"] == 1.0


def test_cuda_graph_training_logs_that_the_decoder_stays_eager_and_why(caplog: pytest.LogCaptureFixture) -> None:
    from libreyolo_models.train.graph_forward import graph_forward
    from libreyolo_models.train.settings import TrainConfig

    model = LibreRTDETR(size="r18", nc=3)
    decl = model.spec.task("detect")
    model.spec = replace(model.spec, tasks={"detect": replace(decl, train_capture=True)})  # as if verified
    with caplog.at_level(logging.INFO, logger="libreyolo_models.train.graph_forward"):
        graphed = graph_forward(model, model.training_module(), TrainConfig(data="shapes", cuda_graph=True),
                                world_size=1)
    lines = [r.getMessage() for r in caplog.records if "cuda_graph=True" in r.getMessage()]
    assert len(lines) == 1 and type(graphed).__name__ == "GraphedTraining"
    assert "the decoder and the loss stay eager" in lines[0] and "denoising queries" in lines[0]
    assert "backbone + encoder are captured" in lines[0]


def _randomize_norm_statistics(net: torch.nn.Module) -> None:
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for m in net.modules():
            if hasattr(m, "running_var") and m.running_var is not None:
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)


def test_fuse_folds_norms_and_merges_repvgg_branches_with_the_same_features() -> None:
    model = LibreRTDETR(size="r18", nc=3)
    _randomize_norm_statistics(model.net)
    x = torch.rand(1, 3, 128, 128)
    model.net.eval()
    with torch.no_grad():
        before = model.net.features(x)
    model.fuse()
    fused = model.fused_net()  # the inference copy; model.net stays trainable
    with torch.no_grad():
        after = fused.features(x)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in fused.backbone.modules())
    assert all(block.conv2 is None for block in fused.encoder.fpn_blocks[0].bottlenecks)
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in model.net.backbone.modules())
    for a, b in zip(before, after):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4)


def test_hgnet_units_fold_their_frozen_norms_including_after_a_pad() -> None:
    from libreyolo_models.layers.detr.rtdetr_hgnet import StemBlock

    stem = StemBlock(3, 32, 48, frozen=True)
    _randomize_norm_statistics(stem)
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        before = stem(x)
        from libreyolo_models.layers.fuse import fuse_network

        assert fuse_network(stem) == 5
        torch.testing.assert_close(stem(x), before, rtol=1e-4, atol=1e-4)
