"""A classifier through the facade: train, validate, predict, plot, save and load; the task
follows from the family; the recipe and the classification options reach the run."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from PIL import Image

from libreyolo_models import ConfigError, LibreYOLO

FAST = {"epochs": 1, "imgsz": 32, "batch": 8, "workers": 0, "device": "cpu", "verbose": False, "plots": False}


def test_resnet18_trains_validates_predicts_and_round_trips(mini_shapes_cls: Path, tmp_path: Path) -> None:
    model = LibreYOLO("LibreResNet18.yaml")
    assert (model.task, model.nc, model.imgsz) == ("classify", 1000, 224)
    outcome = model.train(data=str(mini_shapes_cls), project=str(tmp_path), mixup=0.8, cutmix=1.0, randaugment=9,
                          **FAST)
    assert model.nc == 5 and model.names[0] == "circle"
    with (outcome.run_dir / "results.csv").open() as fh:
        row = next(csv.DictReader(fh))
    assert {"train/cls_loss", "metrics/accuracy_top1", "metrics/accuracy_top5"} <= set(row)
    args = yaml.safe_load((outcome.run_dir / "args.yaml").read_text())
    assert (args["optimizer"], args["label_smoothing"], args["warmup_bias_lr"]) == ("AdamW", 0.1, 0.0)  # the recipe
    assert (args["mixup"], args["cutmix"], args["randaugment"]) == (0.8, 1.0, 9.0)
    best = torch.load(outcome.best, weights_only=True)
    assert best["task"] == "classify" and best["best_metric_name"] == "top1 accuracy" and "best_top1" in best

    metrics = model.val(data=str(mini_shapes_cls), imgsz=32, workers=0, verbose=False)
    assert metrics.n_images == int(metrics.confusion.sum()) > 5 and 0.0 <= metrics.top1 <= metrics.top5 <= 1.0
    assert metrics.top1 == pytest.approx(outcome.metrics["metrics/accuracy_top1"])  # the caller holds the best

    crop = next((mini_shapes_cls.parent / "val" / "star").glob("*.jpg"))
    results = model(crop, imgsz=32)
    probs = results[0].probs
    assert results[0].boxes is None and probs.data.shape == (5,) and float(probs.data.sum()) == pytest.approx(1.0)
    assert probs.top1 == probs.top5[0] and len(probs.top5) == 5 and probs.top1conf == probs.data.max()
    assert results[0].summary().startswith(model.names[probs.top1])
    saved = results[0].save(tmp_path / "pred.png")
    with Image.open(saved) as im:
        drawn = np.asarray(im.convert("RGB"))
    assert drawn.shape == results[0].orig_img.shape and not np.array_equal(drawn, results[0].orig_img)

    path = model.save(tmp_path / "resnet18-shapes.pt")
    again = LibreYOLO(path)
    assert (again.spec.name, again.size, again.task, again.names) == ("resnet", "18", "classify", model.names)
    assert torch.equal(again(crop, imgsz=32)[0].probs.data, probs.data)


def test_classify_options_are_checked_by_name(mini_shapes_cls: Path, tmp_path: Path) -> None:
    model = LibreYOLO(family="mobilenetv4", size="small")
    with pytest.raises(ConfigError, match=r"randaugment=40.*outside \[0.0, 30.0\]"):
        model.train(data=str(mini_shapes_cls), project=str(tmp_path), randaugment=40, **FAST)
    with pytest.raises(ConfigError, match="label_smoothing=1.5 must be in"):
        model.train(data=str(mini_shapes_cls), project=str(tmp_path), label_smoothing=1.5, **FAST)
    with pytest.raises(ConfigError, match="no task 'detect'"):
        LibreYOLO(family="resnet", task="detect")
