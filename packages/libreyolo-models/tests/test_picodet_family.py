"""PicoDet through the facade: names and per-size image sizes, predictions, checkpoints (ours, bare
and Bo-style state dicts), the fused inference copy, the recipe and the declarations."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from libreyolo_models import SAMPLE_IMAGE, LibrePICODET, LibreYOLO, Results
from libreyolo_models.config import load_config
from libreyolo_models.train.settings import TrainConfig
from libreyolo_models.zoo.registry import parse_model_name

IMGSZ = 128


@pytest.fixture(scope="module")
def model() -> LibreYOLO:
    torch.manual_seed(0)
    m = LibrePICODET(size="s", nc=3, names=["circle", "square", "triangle"], imgsz=IMGSZ)
    m.net.train()
    with torch.no_grad():  # BatchNorm statistics that are not the identity, for folding to carry
        for _ in range(3):
            m.net.raw_outputs(torch.rand(2, 3, IMGSZ, IMGSZ))
        for conv in m.net.head.gfl_cls:  # lift the 0.01 prior and spread the box distributions
            conv.bias[:3].copy_(torch.tensor([0.3, 0.8, 0.2]))
            conv.bias[3:].normal_(0.0, 1.0)
    return m.eval()


def _detections(model: LibreYOLO, fuse: bool | None = None) -> torch.Tensor:
    (res,) = model(SAMPLE_IMAGE, conf=0.25, max_det=30, fuse=fuse)
    return res.boxes.data


def test_names_resolve_with_upstreams_image_size_per_size(model: LibreYOLO) -> None:
    parsed = parse_model_name("LibrePICODETm.pt")
    assert (parsed.family.name, parsed.size, parsed.task) == ("picodet", "m", "detect")
    built = LibreYOLO("LibrePICODETl.yaml")
    assert (built.spec.name, built.size, built.imgsz, built.nc) == ("picodet", "l", 640, 80)
    assert [model.spec.default_imgsz(s, "detect") for s in ("s", "m", "l")] == [320, 416, 640]
    assert LibreYOLO("LibrePICODETm.yaml").imgsz == 416  # a multiple of 32, not of the stride-64 level


def test_predict_returns_results_in_original_pixels(model: LibreYOLO) -> None:
    (res,) = model(SAMPLE_IMAGE, conf=0.25, max_det=30)
    assert isinstance(res, Results) and res.orig_shape == (360, 480) and 0 < len(res) <= 30
    boxes = res.boxes.data
    assert boxes[:, :4].min() >= 0 and boxes[:, [0, 2]].max() <= 480 and boxes[:, [1, 3]].max() <= 360


def test_checkpoint_round_trip_gives_the_same_predictions(model: LibreYOLO, tmp_path: Path) -> None:
    path = model.save(tmp_path / "pico.pt")
    ckpt = torch.load(path, weights_only=True)
    assert (ckpt["model_family"], ckpt["size"], ckpt["nc"], ckpt["imgsz"]) == ("picodet", "s", 3, IMGSZ)
    loaded = LibreYOLO(path)
    assert (loaded.spec.name, loaded.size, loaded.names[2]) == ("picodet", "s", "triangle")
    assert torch.equal(_detections(model), _detections(loaded.eval()))


def test_bare_state_dict_loads_with_size_and_classes_read_from_the_weights(model: LibreYOLO, tmp_path: Path) -> None:
    path = tmp_path / "bare.pt"
    torch.save({"model": model.net.state_dict()}, path)
    loaded = LibreYOLO(path, family="picodet", imgsz=IMGSZ)
    assert (loaded.size, loaded.nc) == ("s", 3)  # neck width 96; 3 + 32 outputs of gfl_cls
    assert torch.equal(_detections(model), _detections(loaded.eval()))


def test_fused_copy_predicts_what_the_unfused_network_does(model: LibreYOLO) -> None:
    x = torch.rand(1, 3, IMGSZ, IMGSZ, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        plain = model.inference_forward(x, model.net)
        fused = model.inference_forward(x, model.fused_net())
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in model.fused_net().modules())
    torch.testing.assert_close(fused, plain, rtol=1e-4, atol=1e-4)
    with_fuse, without = _detections(model), _detections(model, fuse=False)
    assert len(with_fuse) == len(without) > 0
    torch.testing.assert_close(with_fuse, without, rtol=1e-4, atol=1e-3)


def test_declarations_pin_syncbn_autospawn_and_graphs_after_their_parity_row() -> None:
    spec = LibrePICODET(size="s").spec
    assert spec.sync_bn_default and spec.ddp_autospawn and spec.stride == 32
    assert spec.mean == (0.485, 0.456, 0.406) and spec.std == (0.229, 0.224, 0.225)  # applied inside the network
    decl = spec.task("detect")
    assert decl.inference_capture and decl.train_capture  # parity rows and certificates, H200 2026-12-05
    assert decl.loss_names == ("cls", "box", "dfl") and decl.loss_gains == {"cls": 1.0, "box": 2.0, "dfl": 0.25}


def test_recipe_is_upstreams_sgd_schedule_per_image() -> None:
    decl = LibrePICODET(size="s").spec.task("detect")
    cfg = load_config(TrainConfig, {**decl.recipe, "data": "shapes"}, "recipe")
    # lr 0.1 and decay 4e-5 on a per-positive loss at batch 16 = these on our per-image sum.
    assert (cfg.optimizer, cfg.nbs, cfg.momentum, cfg.cos_lr, cfg.lrf) == ("SGD", 16, 0.9, True, 0.0)
    assert cfg.lr0 == pytest.approx(0.1 / 16) and cfg.weight_decay == pytest.approx(4e-5 * 16)
    assert (cfg.mosaic, cfg.scale, cfg.translate, cfg.degrees, cfg.fliplr) == (0.0, 0.0, 0.0, 0.0, 0.5)
    assert cfg.max_grad_norm == 0.0  # upstream does not clip
