"""``backbone_lr_scale``: the backbone's own optimizer groups at one chosen rate instead of the
family's recipe (which slows a backbone it expects pretrained), and a clear refusal where a
family's groups never separate the backbone."""

from __future__ import annotations

import pytest

from libreyolo_models import LibreYOLO
from libreyolo_models.config import load_config
from libreyolo_models.errors import ConfigError
from libreyolo_models.train.optim import scale_backbone_groups
from libreyolo_models.train.settings import TrainConfig


def _scales(groups):
    return {g["group"]: g.get("lr_scale", 1.0) for g in groups}


def test_a_detr_familys_backbone_groups_take_the_chosen_rate_and_the_rest_keep_theirs() -> None:
    model = LibreYOLO("LibreRTDETRr18.yaml")
    groups = model.family.parameter_groups(model.net, weight_decay=5e-4)
    assert _scales(groups)["backbone"] == pytest.approx(0.1)  # the recipe's, for a pretrained backbone
    scaled = scale_backbone_groups(model.net, groups, 1.0, "RT-DETR")
    assert _scales(scaled)["backbone"] == 1.0 and _scales(scaled)["backbone_no_decay"] == 1.0
    assert {k: v for k, v in _scales(scaled).items() if not k.startswith("backbone")} == \
        {k: v for k, v in _scales(groups).items() if not k.startswith("backbone")}
    assert [len(g["params"]) for g in scaled] == [len(g["params"]) for g in groups]


def test_rf_detrs_layer_wise_vit_groups_all_take_it() -> None:
    model = LibreYOLO("LibreRFDETRn.yaml")
    groups = model.family.parameter_groups(model.net, weight_decay=5e-4)
    backbone = {id(p) for p in model.net.backbone.parameters()}
    scaled = scale_backbone_groups(model.net, groups, 1.0, "RF-DETR")
    only_backbone = [g for g in scaled if all(id(p) in backbone for p in g["params"])]
    assert len(only_backbone) > 2 and all(g["lr_scale"] == 1.0 for g in only_backbone)


def test_a_family_without_backbone_groups_is_told_and_a_bad_value_named() -> None:
    model = LibreYOLO("LibreYOLO9t.yaml")
    groups = model.family.parameter_groups(model.net, weight_decay=5e-4)
    with pytest.raises(ConfigError, match="backbone_lr_scale=1: YOLOv9 trains its backbone in the same"):
        scale_backbone_groups(model.net, groups, 1.0, "YOLOv9")
    with pytest.raises(ConfigError, match="backbone_lr_scale"):
        TrainConfig(data="shapes", backbone_lr_scale=0.0)
    cli = load_config(TrainConfig, {"data": "shapes", "backbone_lr_scale": "1.0"}, "train()")  # the CLI's text
    assert cli.backbone_lr_scale == 1.0
