"""D-FINE through the facade, and what the fixed-size DETR glue (``detr_family``) gives every family
built on it: names, the size the network is built for (rectangular too), forwards at another
size, checkpoints of another size, ``num_queries``, optimizer groups, the recipe, post-processing
inputs, and what ``train(cuda_graph=True)`` says about the eager decoder."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from libreyolo_models import ConfigError, LibreYOLO, LossContext, UnknownFamilyError
from libreyolo_models.contract.detr import as_hw
from libreyolo_models.layers.detr.anchors import encoder_anchors
from libreyolo_models.zoo.registry import get_family, parse_model_name


def _dfine(imgsz: int | tuple[int, int] | None = None, nc: int = 3) -> torch.nn.Module:
    spec = get_family("dfine")
    return spec.family_class()(spec, "n", "detect", nc, imgsz=imgsz).build_network()


@pytest.mark.parametrize(("name", "family", "size"), [
    ("LibreDFINEn.pt", "dfine", "n"), ("LibreDEIMx.yaml", "deim", "x"), ("LibreDEIMv2atto.yaml", "deimv2", "atto"),
    ("LibreRTDETRv4s.pt", "rtdetrv4", "s"), ("LibreRTDETRv2r50m.pt", "rtdetrv2", "r50m"),
    ("LibreRTDETRr18.pt", "rtdetr", "r18")])
def test_weight_and_architecture_names_resolve_to_the_right_family(name: str, family: str, size: str) -> None:
    parsed = parse_model_name(name)
    assert (parsed.family.name, parsed.size, parsed.task) == (family, size, "detect")


def test_a_size_a_family_lacks_is_named_with_its_sizes() -> None:
    with pytest.raises(UnknownFamilyError, match=r"RT-DETRv4 has no size 'n'; sizes: s, m, l, x"):
        parse_model_name("LibreRTDETRv4n.pt")


def test_the_network_is_built_for_its_size_rectangles_included() -> None:
    assert _dfine().decoder.anchors.shape == (1, 40 * 40 + 20 * 20, 4)      # the declared 640
    net = _dfine((256, 384))
    assert net.decoder.anchors.shape == (1, 16 * 24 + 8 * 12, 4) and net.decoder.valid_mask.shape == (1, 480, 1)
    with pytest.raises(ConfigError, match=r"imgsz=\(250, 384\) must be a positive multiple of 32"):
        as_hw((250, 384))


def test_a_forward_at_the_built_size_reads_the_buffers_and_any_other_size_gets_its_own_anchors() -> None:
    torch.manual_seed(0)
    net = _dfine((256, 384)).eval()
    decoder = net.decoder
    built = [(16, 24), (8, 12)]
    anchors, valid = decoder.anchors_for(built, torch.device("cpu"))
    assert anchors is decoder.anchors and valid is decoder.valid_mask
    other = [(16, 16), (8, 8)]
    fresh, fresh_valid = decoder.anchors_for(other, torch.device("cpu"))
    expected = encoder_anchors(other)
    assert torch.equal(fresh, expected[0]) and torch.equal(fresh_valid, expected[1])
    decoder.num_queries = 20
    x = torch.rand(1, 3, 256, 256)
    with torch.no_grad():
        before = net(x)["pred_boxes"]
        decoder.anchors.add_(1.0)   # a wrong buffer: must not reach a 256x256 forward
        assert torch.equal(net(x)["pred_boxes"], before)


def test_a_checkpoint_built_for_another_size_loads_and_keeps_this_models_anchors(tmp_path: Path) -> None:
    small = LibreYOLO("LibreDFINEn.yaml", nc=3)
    state = _dfine(320).state_dict()
    small.family.check_state(small.net, state, "test")   # another anchor grid is not an error
    small.net.load_state_dict(state)
    assert small.net.decoder.anchors.shape == (1, 2000, 4)
    torch.testing.assert_close(small.net.decoder.anchors, encoder_anchors([(40, 40), (20, 20)])[0])


def test_num_queries_is_a_training_option_only_detr_families_take() -> None:
    from libreyolo_models.train.settings import TrainConfig

    model = LibreYOLO("LibreDFINEn.yaml", nc=3)
    model.family.set_num_queries(model.net, 40)
    assert model.net.decoder.num_queries == 40
    with pytest.raises(ConfigError, match="num_queries=0 must be a positive number"):
        TrainConfig(data="shapes", num_queries=0)
    yolo = LibreYOLO("LibreYOLO9t.yaml", nc=3)
    with pytest.raises(ConfigError, match="YOLOv9 has no decoder queries; the option applies to the DETR families"):
        yolo.family.set_num_queries(yolo.net, 40)


def test_an_input_with_fewer_tokens_than_queries_selects_them_all_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    model = LibreYOLO("LibreDFINEn.yaml", nc=3)
    with caplog.at_level(logging.WARNING), torch.no_grad():
        out = model.net.eval()(torch.rand(1, 3, 64, 64))
    assert out["pred_logits"].shape == (1, 16 + 4, 3)   # 64 px: 4x4 + 2x2 tokens
    assert any("fewer than the 300 queries" in r.getMessage() for r in caplog.records)


def test_training_head_then_loss_reach_every_trainable_parameter_with_and_without_boxes() -> None:
    model = LibreYOLO("LibreDFINEn.yaml", nc=3)
    net, family = model.net.train(), model.family
    family.set_num_queries(net, 30)
    gains = model.spec.task("detect").loss_gains
    for targets in (torch.tensor([[0, 1, 0.5, 0.5, 0.3, 0.3], [1, 2, 0.3, 0.6, 0.2, 0.4]]), torch.zeros(0, 6)):
        net.zero_grad(set_to_none=True)
        head = family.training_head(net, family.training_forward(net, torch.rand(2, 3, 128, 128)), targets)
        result = family.compute_loss(head, targets, LossContext(gains=gains))
        result.total.backward()
        missing = [n for n, p in net.named_parameters() if p.requires_grad and p.grad is None]
        assert not missing and result.items.shape == (5,) and torch.isfinite(result.total)
    with pytest.raises(TypeError, match=r"call training_head\(net, training_forward"):
        family.compute_loss([torch.zeros(1)], torch.zeros(0, 6), LossContext(gains=gains))


def test_parameter_groups_slow_the_backbone_and_never_decay_norms_biases_or_scales() -> None:
    model = LibreYOLO("LibreDFINEn.yaml", nc=3)
    groups = model.family.parameter_groups(model.net, weight_decay=0.05)
    by_name = {g["group"]: g for g in groups}
    assert by_name["backbone"]["lr_scale"] == by_name["backbone_no_decay"]["lr_scale"] == 0.5
    names = {id(p): n for n, p in model.net.named_parameters()}
    seen = [names[id(p)] for g in groups for p in g["params"]]
    trainable = [n for n, p in model.net.named_parameters() if p.requires_grad]
    assert sorted(seen) == sorted(trainable)   # every trainable parameter once; the frozen stem in none
    no_decay = {names[id(p)] for g in groups if g["weight_decay"] == 0 for p in g["params"]}
    assert "backbone.stages.0.blocks.0.layers.0.lab.scale" in no_decay
    assert "decoder.decoder.layers.0.self_attn.in_proj_bias" in no_decay
    assert "decoder.dec_bbox_head.0.layers.0.weight" not in no_decay
    assert "decoder.up" not in seen   # fixed distribution parameters do not train


def test_the_recipe_is_upstreams_and_the_user_still_wins() -> None:
    from libreyolo_models.train.plan import resolve_plan

    model = LibreYOLO("LibreDFINEn.yaml", nc=3)
    cfg = resolve_plan(model, {"data": "shapes", "device": "cpu"}, "test").cfg
    assert (cfg.optimizer, cfg.lr0, cfg.weight_decay, cfg.max_grad_norm, cfg.amp) == ("AdamW", 2e-4, 1e-4, 0.1, False)
    assert (cfg.mosaic, cfg.fliplr, cfg.hsv_s, cfg.cos_lr, cfg.lrf) == (0.0, 0.5, 0.0, True, 0.05)
    mine = resolve_plan(model, {"data": "shapes", "device": "cpu", "lr0": 1e-3, "num_queries": 100}, "test").cfg
    assert mine.lr0 == 1e-3 and mine.num_queries == 100


def test_cuda_graph_training_logs_that_the_decoder_stays_eager_and_why(caplog: pytest.LogCaptureFixture) -> None:
    from libreyolo_models.train.graph_forward import graph_forward
    from libreyolo_models.train.settings import TrainConfig

    model = LibreYOLO("LibreDFINEn.yaml", nc=3)
    decl = model.spec.task("detect")
    model.spec = replace(model.spec, tasks={"detect": replace(decl, train_capture=True)})  # as if verified
    with caplog.at_level(logging.INFO, logger="libreyolo_models.train.graph_forward"):
        graph_forward(model, model.training_module(), TrainConfig(data="shapes", cuda_graph=True), world_size=1)
    lines = [r.getMessage() for r in caplog.records if "cuda_graph=True" in r.getMessage()]
    assert len(lines) == 1 and "denoising queries" in lines[0] and "backbone + encoder are captured" in lines[0]
