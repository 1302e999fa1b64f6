"""EC through the facade: names, checkpoints, the seams (split training: the decoder with its
denoising queries runs after the captured prefix), post-processing, training (every parameter
reached, the loss falls), optimizer groups and the recipe."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from libreyolo_models import (
    SAMPLE_IMAGE,
    ConfigError,
    LibreEC,
    LibreYOLO,
    LossContext,
    Results,
    UnknownFamilyError,
)
from libreyolo_models.families.ec.family import ECFamily
from libreyolo_models.zoo.registry import parse_model_name


@pytest.fixture(scope="module")
def model() -> LibreYOLO:
    torch.manual_seed(0)
    return LibreEC(size="s", nc=3, names=["a", "b", "c"], imgsz=64)


def test_weight_names_and_architecture_specs_resolve_to_ec_sizes() -> None:
    parsed = parse_model_name("LibreECm.pt")
    assert (parsed.family.name, parsed.size, parsed.task) == ("ec", "m", "detect")
    assert parse_model_name("LibreECx.yaml").size == "x"
    with pytest.raises(UnknownFamilyError, match=r"EC has no size 'n'; sizes: s, m, l, x"):
        parse_model_name("LibreECn.pt")


def test_family_builds_its_anchors_for_the_image_size_it_is_given() -> None:
    spec = LibreEC(size="s", nc=3).spec
    assert ECFamily(spec, "s", "detect", 3).imgsz == (640, 640)
    net = ECFamily(spec, "s", "detect", 3, imgsz=(320, 384)).build_network()
    assert net.decoder.anchors.shape == (1, 40 * 48 + 20 * 24 + 10 * 12, 4)
    with pytest.raises(ConfigError, match=r"multiples of 32"):
        ECFamily(spec, "s", "detect", 3, imgsz=100)


def test_checkpoint_round_trip_keeps_weights_metadata_and_predictions(model: LibreYOLO, tmp_path: Path) -> None:
    path = model.save(tmp_path / "LibreECs.pt")
    ckpt = torch.load(path, weights_only=True)
    assert (ckpt["model_family"], ckpt["size"], ckpt["nc"], ckpt["imgsz"]) == ("ec", "s", 3, 64)
    again = LibreYOLO(path)
    assert (again.spec.name, again.size, again.names) == ("ec", "s", model.names)
    assert all(torch.equal(a, b) for a, b in zip(model.net.state_dict().values(), again.net.state_dict().values()))
    first = model(SAMPLE_IMAGE, conf=0.0, max_det=10)
    second = again(SAMPLE_IMAGE, conf=0.0, max_det=10)
    assert isinstance(first[0], Results) and len(first[0]) == 10
    assert torch.equal(first[0].boxes.data, second[0].boxes.data)
    bare = tmp_path / "bare.pt"
    torch.save(model.net.state_dict(), bare)
    from_bare = LibreYOLO(bare, family="ec")
    assert (from_bare.size, from_bare.nc) == ("s", 3)


def test_a_checkpoint_trained_at_another_size_loads_without_a_divergence_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Built at 640, EC's stored anchor grid masks cells with inf; a run at 64 px saves those
    anchors with imgsz 64, and the network rebuilt at 64 keeps its own (finite) grid: nothing
    diverged, so loading warns of nothing."""
    built = LibreYOLO("LibreECs.yaml", nc=3)
    assert not torch.isfinite(built.net.state_dict()["decoder.anchors"]).all()
    ckpt = torch.load(built.save(tmp_path / "at640.pt"), weights_only=True)
    ckpt["imgsz"] = 64                        # what training at imgsz=64 writes
    torch.save(ckpt, tmp_path / "at64.pt")
    with caplog.at_level("WARNING", logger="libreyolo_models"):
        LibreYOLO(tmp_path / "at64.pt")
    assert not [r for r in caplog.records if r.levelname == "WARNING"], caplog.text


def test_inference_seam_returns_pixel_boxes_and_scores_for_every_selected_token(model: LibreYOLO) -> None:
    model.net.eval()
    with torch.no_grad():
        out = model.inference_forward(torch.rand(2, 3, 64, 96))
    assert out.shape == (2, 8 * 12 + 4 * 6 + 2 * 3, 4 + 3)  # fewer tokens than 300: every token a query
    assert ((out[..., 4:] >= 0) & (out[..., 4:] <= 1)).all()


def test_compute_loss_needs_the_training_head_outputs(model: LibreYOLO) -> None:
    with pytest.raises(TypeError, match=r"call training_head\(net, training_forward"):
        model.family.compute_loss([torch.zeros(1)], torch.zeros(0, 6), LossContext(gains={}))


def test_training_head_then_loss_reach_every_trainable_parameter(model: LibreYOLO) -> None:
    """What DDP without find_unused_parameters needs, also for a batch without a single box."""
    net, family = model.net.train(), model.family
    gains = model.spec.task("detect").loss_gains
    for targets in (torch.tensor([[0, 1, 0.5, 0.5, 0.3, 0.3], [1, 2, 0.3, 0.6, 0.2, 0.4]]), torch.zeros(0, 6)):
        net.zero_grad(set_to_none=True)
        head = family.training_head(net, family.training_forward(net, torch.rand(2, 3, 64, 64)), targets)
        result = family.compute_loss(head, targets, LossContext(gains=gains))
        result.total.backward()
        missing = [n for n, p in net.named_parameters() if p.requires_grad and p.grad is None]
        assert not missing and result.items.shape == (5,) and torch.isfinite(result.total)


def test_loss_falls_over_20_steps_on_a_fixed_batch() -> None:
    """Overfitting one batch: 2 images at 64 px (84 tokens, so 84 queries; 20 denoising queries
    instead of upstream's ~100, which would dominate the step at this size), AdamW at 1e-3.
    Measured: 53.7 -> 37.5 over the 20 steps (4 s of CPU time on 2 threads)."""
    torch.manual_seed(0)
    model = LibreEC(size="s", nc=3, imgsz=64)
    net, family = model.net.train(), model.family
    family.num_denoising = 20
    gains = model.spec.task("detect").loss_gains
    images = torch.rand(2, 3, 64, 64)
    targets = torch.tensor([[0, 1, 0.5, 0.5, 0.4, 0.3], [1, 2, 0.3, 0.6, 0.3, 0.5], [1, 0, 0.7, 0.3, 0.2, 0.2]])
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3)
    losses = []
    for _ in range(20):
        head = family.training_head(net, family.training_forward(net, images), targets)
        result = family.compute_loss(head, targets, LossContext(gains=gains))
        optimizer.zero_grad()
        result.total.backward()
        optimizer.step()
        losses.append(result.total.item())
    assert sum(losses[-3:]) / 3 < 0.8 * sum(losses[:3]) / 3, losses


def test_parameter_groups_slow_the_backbone_and_never_decay_norms_or_biases() -> None:
    for size, scale in (("s", 0.05), ("l", 0.01)):
        with torch.device("meta"):
            model = LibreEC(size=size, nc=3)
        groups = model.family.parameter_groups(model.net, weight_decay=0.05)
        by_name = {g["group"]: g for g in groups}
        assert set(by_name) == {"backbone", "backbone_no_decay", "head", "head_no_decay"}
        assert by_name["backbone"]["lr_scale"] == by_name["backbone_no_decay"]["lr_scale"] == scale
    names = {id(p): n for n, p in model.net.named_parameters()}
    seen = [names[id(p)] for g in groups for p in g["params"]]
    assert sorted(seen) == sorted(n for n, p in model.net.named_parameters() if p.requires_grad)
    no_decay = {names[id(p)] for g in groups if g["weight_decay"] == 0 for p in g["params"]}
    assert "decoder.decoder.layers.0.self_attn.in_proj_bias" in no_decay
    assert "backbone.backbone.blocks.0.norm1.weight" in no_decay and "decoder.decoder.up" not in seen  # frozen


def test_the_recipe_is_upstreams_and_the_user_still_wins() -> None:
    from libreyolo_models.train.plan import resolve_plan

    model = LibreEC(size="s", nc=3)
    plan = resolve_plan(model, {"data": "shapes", "device": "cpu"}, "test")
    cfg = plan.cfg
    assert (cfg.optimizer, cfg.lr0, cfg.lrf, cfg.cos_lr, cfg.weight_decay) == ("AdamW", 5e-4, 0.5, True, 1e-4)
    assert (cfg.max_grad_norm, cfg.mosaic, cfg.close_mosaic, cfg.degrees, cfg.epochs) == (0.1, 0.75, 4, 10.0, 74)
    assert plan.gains == {"mal": 1.0, "bbox": 5.0, "giou": 2.0, "fgl": 0.15, "ddf": 1.5} and plan.sync_bn is False
    mine = resolve_plan(model, {"data": "shapes", "device": "cpu", "lr0": 1e-4, "gains": {"fgl": 0.3}}, "test")
    assert mine.cfg.lr0 == 1e-4 and mine.gains["fgl"] == 0.3


def test_a_checkpoint_built_for_another_image_size_loads_with_this_networks_anchors(tmp_path: Path) -> None:
    """Upstream stores anchors for its build size (640 for every published checkpoint); they are
    generated, never trained, so another size's are replaced by this network's on load."""
    torch.manual_seed(0)
    spec = LibreEC(size="s", nc=3).spec
    small = ECFamily(spec, "s", "detect", 3, imgsz=320).build_network()
    state = small.state_dict()
    model = LibreEC(size="s", nc=3)  # built for 640
    model.family.check_state(model.net, state, "test")
    model.net.load_state_dict(state)
    assert model.net.decoder.anchors.shape == (1, 8400, 4)
    assert torch.equal(model.net.decoder.enc_score_head.weight, small.decoder.enc_score_head.weight)
