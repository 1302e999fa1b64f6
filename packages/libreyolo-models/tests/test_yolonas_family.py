"""YOLO-NAS through the facade: names, predictions, checkpoints (ours and bare state dicts), the fused
inference copy, the recipe and the declarations (SyncBatchNorm, DDP, graphs)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from libreyolo_models import SAMPLE_IMAGE, LibreYOLO, LibreYOLONAS, Results
from libreyolo_models.config import load_config
from libreyolo_models.train.settings import TrainConfig
from libreyolo_models.zoo.registry import parse_model_name

IMGSZ = 64


@pytest.fixture(scope="module")
def model() -> LibreYOLO:
    torch.manual_seed(0)
    m = LibreYOLONAS(size="s", nc=3, names=["circle", "square", "triangle"], imgsz=IMGSZ)
    m.net.train()
    with torch.no_grad():  # BatchNorm statistics that are not the identity, for folding to carry
        for _ in range(3):
            m.net(torch.rand(2, 3, IMGSZ, IMGSZ))
        for head in (m.net.heads.head1, m.net.heads.head2, m.net.heads.head3):  # lift the 0.01 prior
            head.cls_pred.bias.copy_(torch.tensor([0.3, 0.8, 0.2]))
    return m.eval()


def _detections(model: LibreYOLO, fuse: bool | None = None) -> torch.Tensor:
    (res,) = model(SAMPLE_IMAGE, conf=0.25, max_det=30, fuse=fuse)
    return res.boxes.data


def test_names_resolve_to_the_family_at_upstreams_image_size(model: LibreYOLO) -> None:
    parsed = parse_model_name("LibreYOLONASm.pt")
    assert (parsed.family.name, parsed.size, parsed.task) == ("yolonas", "m", "detect")
    assert parse_model_name("LibreYOLONASl.yaml").family is model.spec
    assert [model.spec.default_imgsz(size, "detect") for size in model.spec.sizes_for("detect")] == [640, 640, 640]
    assert model.spec.default_size == "s"


def test_predict_returns_results_in_original_pixels(model: LibreYOLO) -> None:
    (res,) = model(SAMPLE_IMAGE, conf=0.25, max_det=30)
    assert isinstance(res, Results) and res.orig_shape == (360, 480) and 0 < len(res) <= 30
    boxes = res.boxes.data
    assert boxes[:, :4].min() >= 0 and boxes[:, [0, 2]].max() <= 480 and boxes[:, [1, 3]].max() <= 360
    assert set(boxes[:, 5].long().tolist()) <= {0, 1, 2}


def test_checkpoint_round_trip_gives_the_same_predictions(model: LibreYOLO, tmp_path: Path) -> None:
    path = model.save(tmp_path / "nas.pt")
    ckpt = torch.load(path, weights_only=True)
    assert (ckpt["model_family"], ckpt["size"], ckpt["nc"], ckpt["imgsz"]) == ("yolonas", "s", 3, IMGSZ)
    assert list(ckpt["model"]) == list(model.net.state_dict())  # rbr_reparam and alpha included
    loaded = LibreYOLO(path)
    assert (loaded.spec.name, loaded.size, loaded.names[1]) == ("yolonas", "s", "square")
    assert torch.equal(_detections(model), _detections(loaded.eval()))


def test_bare_state_dict_loads_with_size_and_classes_read_from_the_weights(model: LibreYOLO, tmp_path: Path) -> None:
    path = tmp_path / "bare.pt"
    torch.save({"model": model.net.state_dict()}, path)  # an upstream-style file without metadata
    loaded = LibreYOLO(path, family="yolonas", imgsz=IMGSZ)
    assert (loaded.size, loaded.nc) == ("s", 3)
    assert torch.equal(_detections(model), _detections(loaded.eval()))


def test_fused_copy_folds_every_qarepvgg_block_and_predicts_what_the_branches_do(model: LibreYOLO) -> None:
    x = torch.rand(1, 3, IMGSZ, IMGSZ, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        plain = model.inference_forward(x, model.net)
        fused_net = model.fused_net()
        fused = model.inference_forward(x, fused_net)
    blocks = [m for m in fused_net.modules() if hasattr(m, "rbr_reparam")]
    assert len(blocks) == 37 and all(b.fused for b in blocks)
    assert not any(getattr(m, "fused", False) for m in model.net.modules())  # the trainable network keeps its branches
    torch.testing.assert_close(fused[:, 4:], plain[:, 4:], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(fused[:, :4], plain[:, :4], rtol=1e-4, atol=1e-3)
    assert model.spec.task("detect").inference_fuse  # predict fuses by default ...
    with_fuse, without = _detections(model), _detections(model, fuse=False)
    assert len(with_fuse) == len(without) > 0  # ... and finds the same boxes
    torch.testing.assert_close(with_fuse, without, rtol=1e-4, atol=1e-3)


def test_declarations_pin_syncbn_autospawn_and_graphs_after_their_parity_row() -> None:
    spec = LibreYOLONAS(size="s").spec
    assert spec.sync_bn_default and spec.ddp_autospawn and spec.stride == 32
    decl = spec.task("detect")
    assert decl.inference_capture and decl.train_capture  # parity row and certificate, H200 2026-12-05
    assert decl.loss_names == ("cls", "iou", "dfl") and decl.loss_gains == {"cls": 1.0, "iou": 2.5, "dfl": 0.5}


def test_recipe_is_upstreams_adamw_schedule_in_train_config_values() -> None:
    decl = LibreYOLONAS(size="s").spec.task("detect")
    cfg = load_config(TrainConfig, {**decl.recipe, "data": "shapes"}, "recipe")
    assert (cfg.optimizer, cfg.lr0, cfg.weight_decay, cfg.nbs, cfg.cos_lr, cfg.lrf) == ("AdamW", 5e-4, 1e-5, 16, True, 0.1)
    assert (cfg.mosaic, cfg.translate, cfg.scale, cfg.fliplr, cfg.amp, cfg.warmup_bias_lr) == (0.0, 0.25, 0.5, 0.5, False, 0.0)
    assert cfg.max_grad_norm == 0.0  # upstream does not clip
    assert decl.recipe_shares == {"warmup_epochs": 0.3, "close_mosaic": 0.3}


def test_residual_scales_are_trained_without_weight_decay(model: LibreYOLO) -> None:
    groups = {g["group"]: g for g in model.family.parameter_groups(model.net, weight_decay=0.1)}
    alphas = {id(p) for n, p in model.net.named_parameters() if n.endswith(".alpha")}
    assert len(alphas) == (2 + 3 + 5 + 2) + 4 * 2  # one per bottleneck: stages 2, 3, 5, 2; neck 2 each
    assert alphas <= {id(p) for p in groups["norm"]["params"]}
    assert not alphas & {id(p) for p in groups["decay"]["params"]}
    frozen = {id(p) for n, p in model.net.named_parameters() if "rbr_reparam" in n}
    assert not frozen & {id(p) for g in groups.values() for p in g["params"]}  # never trained
