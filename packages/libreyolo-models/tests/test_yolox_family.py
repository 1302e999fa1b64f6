"""YOLOX through the facade: predictions, checkpoints (save, load, bare state dicts), the recipe."""

from __future__ import annotations

import pytest
import torch

from libreyolo_models import SAMPLE_IMAGE, LibreYOLO, LibreYOLOX
from libreyolo_models.config import load_config
from libreyolo_models.train.settings import TrainConfig

IMGSZ = 128


@pytest.fixture(scope="module")
def model() -> LibreYOLO:
    torch.manual_seed(0)
    m = LibreYOLOX(size="n", nc=3, names=["circle", "square", "triangle"], imgsz=IMGSZ)
    with torch.no_grad():  # the prior (0.01 x 0.01) scores nothing; lift it so NMS has work
        for obj, cls in zip(m.net.head.obj_preds, m.net.head.cls_preds):
            obj.bias.fill_(2.0)
            cls.bias.copy_(torch.tensor([0.3, 0.7, 0.2]))
    return m.eval()


def _detections(model: LibreYOLO, fuse: bool | None = None) -> list[torch.Tensor]:
    return [r.boxes.data for r in model(SAMPLE_IMAGE, conf=0.3, max_det=30, fuse=fuse)]


def test_predict_returns_boxes_in_original_pixels_with_obj_times_cls_scores(model) -> None:
    (res,) = model(SAMPLE_IMAGE, conf=0.3, max_det=30)
    assert res.orig_shape == (360, 480) and 0 < len(res) <= 30
    boxes = res.boxes.data
    assert (boxes[:, 2] >= boxes[:, 0]).all() and (boxes[:, 3] >= boxes[:, 1]).all()  # clipped: may be flat
    assert boxes[:, :4].min() >= 0 and boxes[:, [0, 2]].max() <= 480 and boxes[:, [1, 3]].max() <= 360
    assert boxes[:, 4].max() <= torch.sigmoid(torch.tensor(2.0)) + 1e-6  # obj x cls, both below 1


def test_checkpoint_round_trip_gives_the_same_predictions(model, tmp_path) -> None:
    path = model.save(tmp_path / "yolox.pt")
    ckpt = torch.load(path, weights_only=True)
    assert (ckpt["model_family"], ckpt["size"], ckpt["nc"], ckpt["imgsz"]) == ("yolox", "n", 3, IMGSZ)
    loaded = LibreYOLO(path)
    assert (loaded.spec.name, loaded.size, loaded.names[1]) == ("yolox", "n", "square")
    before, after = _detections(model), _detections(loaded.eval())
    assert len(before[0]) > 0 and all(torch.equal(a, b) for a, b in zip(before, after))


def test_bare_upstream_state_dict_loads_with_size_and_classes_read_from_the_weights(model, tmp_path) -> None:
    path = tmp_path / "LibreYOLOXn.pt"
    torch.save({"model": model.net.state_dict()}, path)  # an upstream-style file without metadata
    loaded = LibreYOLO(path, imgsz=IMGSZ)
    assert (loaded.spec.name, loaded.size, loaded.nc) == ("yolox", "n", 3)
    assert all(torch.equal(a, b) for a, b in zip(_detections(model), _detections(loaded.eval())))


def test_fused_yolox_predicts_what_the_unfused_one_does(model) -> None:
    fused = LibreYOLOX(size="n", nc=3, imgsz=IMGSZ)
    fused.net.load_state_dict(model.net.state_dict())
    fused.eval().fuse()
    plain, merged = _detections(model, fuse=False), _detections(fused)
    assert torch.equal(merged[0], _detections(model)[0])  # YOLOX predicts fused by default
    assert len(plain[0]) == len(merged[0]) > 0
    torch.testing.assert_close(merged[0], plain[0], rtol=1e-4, atol=1e-3)


def test_recipe_translates_upstream_yolox_into_train_config_values() -> None:
    decl = LibreYOLOX(size="n").spec.task("detect")
    cfg = load_config(TrainConfig, {**decl.recipe, "data": "shapes"}, "recipe")
    assert (cfg.optimizer, cfg.momentum, cfg.cos_lr, cfg.close_mosaic, cfg.mosaic) == ("SGD", 0.9, True, 15, 1.0)
    # The trainer's clipped step at 0.01 (measured faster than upstream's 0.01 / 64 unclipped; see
    # the spec); YOLOX's decay per image times the nominal batch; fp32 (fp16 turned its losses NaN).
    assert cfg.lr0 == pytest.approx(0.01) and cfg.weight_decay == pytest.approx(5e-4 * 64)
    assert cfg.max_grad_norm == 10.0 and cfg.amp is False
    assert cfg.warmup_epochs == 5 and cfg.warmup_bias_lr == 0.0 and cfg.lrf == 0.05
    assert decl.loss_gains == {"iou": 5.0, "obj": 1.0, "cls": 1.0, "l1": 1.0}
    assert decl.inference_capture and decl.train_capture  # set from green GPU parity rows (docs/parity-matrix.md)


def test_recipe_clips_yolox_gradients_which_start_in_the_thousands() -> None:
    """YOLOX's gradient norm starts over 100x the clip (loss scaled by the global batch, a 0..255
    stem): with the clip, each early step has the clip's length, so lr0 must be the trainer's 0.01
    (with upstream's 0.01 / 64 the clipped network froze: mAP50 0.000)."""
    from libreyolo_models.contract.family import LossContext

    model = LibreYOLOX(size="n", nc=5, imgsz=IMGSZ)
    decl = model.spec.task("detect")
    cfg = load_config(TrainConfig, {**decl.recipe, "data": "shapes"}, "recipe")
    assert cfg.max_grad_norm == 10.0 and cfg.lr0 == pytest.approx(0.01)
    torch.manual_seed(0)
    net = model.net.train()
    images = torch.rand(4, 3, IMGSZ, IMGSZ)
    targets = model.family.sample_targets(4, IMGSZ, torch.Generator().manual_seed(0))
    outputs = model.family.training_forward(net, images)
    model.family.compute_loss(outputs, targets, LossContext(gains=dict(decl.loss_gains), global_batch=16)).total.backward()
    norm = torch.nn.utils.get_total_norm([p.grad for p in net.parameters() if p.grad is not None])
    default_clip = TrainConfig.__dataclass_fields__["max_grad_norm"].default
    assert norm > 100 * default_clip  # the default clip would shrink this step over 100x


@pytest.mark.parametrize(("options", "warmup", "close_mosaic"), [
    ({"epochs": 12}, 0.3 * 12, 4),                        # 5 and 15 of 300 would be 42 % and all of 12
    ({"epochs": 12, "warmup_epochs": 5}, 5.0, 4),         # what the user sets is kept
    ({"epochs": 300}, 5.0, 15),                           # a COCO-length run keeps upstream's recipe
])
def test_recipe_epoch_counts_scale_down_to_a_short_run(options, warmup, close_mosaic, caplog) -> None:
    from libreyolo_models.train.plan import resolve_plan

    with caplog.at_level("INFO", logger="libreyolo_models.train.plan"):
        plan = resolve_plan(LibreYOLOX(size="n"), {"data": "shapes", "device": "cpu", **options}, "train()")
    assert (plan.cfg.warmup_epochs, plan.cfg.close_mosaic) == (pytest.approx(warmup), close_mosaic)
    assert isinstance(plan.cfg.close_mosaic, int)
    assert ("recipe scaled to a 12-epoch run" in caplog.text) == (options["epochs"] == 12)


@pytest.mark.parametrize(("shares", "match"), [
    ({"lr0": 0.5}, r"recipe_shares names 'lr0'; only epoch counts .*warmup_epochs, close_mosaic"),
    ({"warmup_epochs": 1.5}, r"recipe_shares\['warmup_epochs'\]=1.5 must be in \(0, 1\]"),
])
def test_recipe_shares_are_epoch_counts_and_shares(shares, match) -> None:
    from libreyolo_models import ConfigError, TaskDecl

    with pytest.raises(ConfigError, match=match):
        TaskDecl(loss_names=("x",), recipe_shares=shares)
