"""RF-DETR through the facade: names, checkpoints, the seams, post-processing, training (every
parameter reached, the loss falls), optimizer groups and the recipe."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from libreyolo_models import (
    SAMPLE_IMAGE,
    ConfigError,
    LibreRFDETR,
    LibreYOLO,
    LossContext,
    Results,
    UnknownFamilyError,
)
from libreyolo_models.families.rfdetr.family import RFDETRFamily
from libreyolo_models.zoo.registry import parse_model_name


@pytest.fixture(scope="module")
def model() -> LibreYOLO:
    torch.manual_seed(0)
    return LibreRFDETR(size="n", nc=3, names=["a", "b", "c"], imgsz=64)


def test_weight_names_and_architecture_specs_resolve_to_rfdetr_sizes() -> None:
    parsed = parse_model_name("LibreRFDETRs.pt")
    assert (parsed.family.name, parsed.size, parsed.task) == ("rfdetr", "s", "detect")
    assert parse_model_name("LibreRFDETRl.yaml").size == "l"
    with pytest.raises(UnknownFamilyError, match=r"RF-DETR has no size 'x'; sizes: n, s, m, l"):
        parse_model_name("LibreRFDETRx.pt")


def test_default_image_sizes_are_upstream_resolutions() -> None:
    spec = LibreRFDETR(size="n", nc=3).spec
    assert [spec.default_imgsz(size, "detect") for size in spec.sizes] == [384, 512, 576, 704]


def test_family_takes_an_image_size_that_fits_its_patch_windows() -> None:
    spec = LibreRFDETR(size="n", nc=3).spec
    assert RFDETRFamily(spec, "n", "detect", 3).imgsz == (384, 384)
    assert RFDETRFamily(spec, "n", "detect", 3, imgsz=(320, 640)).imgsz == (320, 640)
    with pytest.raises(ConfigError, match=r"multiples of 32 \(16-pixel patches in 2x2 windows\)"):
        RFDETRFamily(spec, "n", "detect", 3, imgsz=336)


def test_checkpoint_round_trip_keeps_weights_metadata_and_predictions(model: LibreYOLO, tmp_path: Path) -> None:
    path = model.save(tmp_path / "LibreRFDETRn.pt")
    ckpt = torch.load(path, weights_only=True)
    assert (ckpt["model_family"], ckpt["size"], ckpt["nc"], ckpt["imgsz"]) == ("rfdetr", "n", 3, 64)
    assert "class_embed.weight" in ckpt["model"] and not any(k.startswith("model.") for k in ckpt["model"])
    again = LibreYOLO(path)
    assert (again.spec.name, again.size, again.names) == ("rfdetr", "n", model.names)
    assert all(torch.equal(a, b) for a, b in zip(model.net.state_dict().values(), again.net.state_dict().values()))
    first = model(SAMPLE_IMAGE, conf=0.0, max_det=10)
    second = again(SAMPLE_IMAGE, conf=0.0, max_det=10)
    assert isinstance(first[0], Results) and len(first[0]) == 10
    assert torch.equal(first[0].boxes.data, second[0].boxes.data)
    bare = tmp_path / "bare.pt"
    torch.save(model.net.state_dict(), bare)  # no metadata: size and nc come from the weights
    from_bare = LibreYOLO(bare, family="rfdetr")
    assert (from_bare.size, from_bare.nc) == ("n", 3)


def test_inference_seam_returns_pixel_boxes_and_the_class_scores_only(model: LibreYOLO) -> None:
    model.net.eval()
    with torch.no_grad():
        out = model.inference_forward(torch.rand(2, 3, 64, 96))
        raw = model.net(torch.rand(2, 3, 64, 96))
    assert out.shape == (2, 300, 4 + 3)  # the class head's 4th (never-a-target) output is left out
    assert raw["pred_logits"].shape == (2, 300, 4)
    assert ((out[..., 4:] >= 0) & (out[..., 4:] <= 1)).all()
    assert set(raw) == {"pred_logits", "pred_boxes", "aux_outputs", "enc_outputs"} and len(raw["aux_outputs"]) == 1


def test_an_image_side_off_the_patch_grid_names_the_multiple(model: LibreYOLO) -> None:
    with pytest.raises(ValueError, match=r"multiples of 32 \(16-pixel patches in 2x2 windows\); got 48x64"):
        model.net(torch.rand(1, 3, 48, 64))


def test_training_reaches_every_trainable_parameter_with_and_without_boxes(model: LibreYOLO) -> None:
    """What DDP without find_unused_parameters needs: all 13 query groups, a batch with boxes and
    one without (the unused ``mask_token`` is frozen)."""
    net, family = model.net.train(), model.family
    gains = model.spec.task("detect").loss_gains
    for targets in (torch.tensor([[0, 1, 0.5, 0.5, 0.3, 0.3]]), torch.zeros(0, 6)):
        net.zero_grad(set_to_none=True)
        out = family.training_forward(net, torch.rand(1, 3, 64, 64))
        assert out["pred_logits"].shape == (1, 13 * 300, 4) and out["enc_outputs"]["pred_logits"].shape == (1, 13 * 16, 4)
        result = family.compute_loss(out, targets, LossContext(gains=gains))
        result.total.backward()
        missing = [n for n, p in net.named_parameters() if p.requires_grad and p.grad is None]
        assert not missing and result.items.shape == (3,) and torch.isfinite(result.total)
    assert not net.backbone[0].encoder.encoder.embeddings.mask_token.requires_grad


def test_fewer_training_queries_take_the_first_rows_of_each_group() -> None:
    torch.manual_seed(0)
    net = LibreRFDETR(size="n", nc=3, imgsz=64).net.train()
    net.set_training_queries(queries=5, groups=2)
    refs, feats = net._embeddings(5, 2)
    assert torch.equal(feats, net.query_feat.weight[[0, 1, 2, 3, 4, 300, 301, 302, 303, 304]])
    out = net(torch.rand(1, 3, 64, 64))
    assert out["pred_logits"].shape == (1, 10, 4) and out["enc_outputs"]["pred_logits"].shape == (1, 10, 4)
    assert net.eval()(torch.rand(1, 3, 64, 64))["pred_logits"].shape == (1, 300, 4)  # inference unchanged
    with pytest.raises(ValueError, match=r"training groups=14 must be in \[1, 13\]"):
        net.set_training_queries(groups=14)


def test_loss_falls_over_20_steps_on_a_fixed_batch() -> None:
    """Overfitting one batch: 2 images at 64 px, 10 queries in 2 groups (the token grid is 4 x 4),
    AdamW at 5e-4. Measured: 16.8 -> 7.9 over the 20 steps (about 4 s on 2 CPU threads)."""
    torch.manual_seed(0)
    model = LibreRFDETR(size="n", nc=3, imgsz=64)
    net, family = model.net.train(), model.family
    net.set_training_queries(queries=10, groups=2)
    gains = model.spec.task("detect").loss_gains
    images = torch.rand(2, 3, 64, 64)
    targets = torch.tensor([[0, 1, 0.5, 0.5, 0.4, 0.3], [1, 2, 0.3, 0.6, 0.3, 0.5], [1, 0, 0.7, 0.3, 0.2, 0.2]])
    optimizer = torch.optim.AdamW(net.parameters(), lr=5e-4)
    losses = []
    for _ in range(20):
        result = family.compute_loss(family.training_forward(net, images), targets, LossContext(gains=gains))
        optimizer.zero_grad()
        result.total.backward()
        optimizer.step()
        losses.append(result.total.item())
    assert sum(losses[-3:]) / 3 < 0.75 * sum(losses[:3]) / 3, losses


def test_parameter_groups_follow_upstream_rates_and_never_decay_norms_or_biases() -> None:
    net = LibreRFDETR(size="n", nc=3).net
    groups = LibreRFDETR(size="n", nc=3).family.parameter_groups(net, weight_decay=0.05)
    names = {id(p): n for n, p in net.named_parameters()}
    seen = [names[id(p)] for g in groups for p in g["params"]]
    assert sorted(seen) == sorted(n for n, p in net.named_parameters() if p.requires_grad)  # each once
    scale = {names[id(p)]: g["lr_scale"] for g in groups for p in g["params"]}
    decay = {names[id(p)]: g["weight_decay"] for g in groups for p in g["params"]}
    vit = "backbone.0.encoder.encoder."
    assert scale[vit + "layernorm.weight"] == pytest.approx(0.735)
    assert scale[vit + "encoder.layer.11.mlp.fc1.weight"] == pytest.approx(0.735 * 0.8**2)
    assert scale[vit + "embeddings.position_embeddings"] == pytest.approx(0.735 * 0.8**14)
    assert scale["transformer.decoder.layers.0.linear1.weight"] == 0.7 and scale["class_embed.weight"] == 1.0
    assert decay[vit + "encoder.layer.0.attention.attention.query.weight"] == 0.05
    assert decay[vit + "embeddings.patch_embeddings.projection.weight"] == 0.0  # upstream: embeddings never decay
    assert decay["backbone.0.projector.stages.0.1.weight"] == 0.0 and decay["class_embed.bias"] == 0.0
    assert decay["query_feat.weight"] == 0.05


def test_the_recipe_is_upstreams_and_the_user_still_wins() -> None:
    from libreyolo_models.train.plan import resolve_plan

    model = LibreRFDETR(size="n", nc=3)
    plan = resolve_plan(model, {"data": "shapes", "device": "cpu"}, "test")
    cfg = plan.cfg
    assert (cfg.optimizer, cfg.lr0, cfg.lrf, cfg.weight_decay, cfg.max_grad_norm) == ("AdamW", 1e-4, 1.0, 1e-4, 0.1)
    assert (cfg.batch, cfg.nbs, cfg.warmup_epochs, cfg.mosaic, cfg.epochs) == (4, 16, 0.0, 0.0, 100)
    assert plan.gains == {"cls": 1.0, "bbox": 5.0, "giou": 2.0} and plan.sync_bn is False
    mine = resolve_plan(model, {"data": "shapes", "device": "cpu", "lr0": 3e-4, "cls": 2.0}, "test")
    assert mine.cfg.lr0 == 3e-4 and mine.gains["cls"] == 2.0
