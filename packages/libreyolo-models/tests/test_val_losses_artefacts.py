"""Validation losses in results.csv / results.png (detect, through the family's loss), and the
``val_batch*_labels.jpg`` / ``val_batch*_pred.jpg`` pictures of training's last validation and of
``model.val(plots=True)``."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from libreyolo_models import LibreYOLO
from libreyolo_models.tasks.detect.pictures import plot_predictions
from libreyolo_models.tasks.loss_meter import LossMeter


@pytest.fixture(scope="module")
def run(mini_shapes: Path, tmp_path_factory: pytest.TempPathFactory):
    model = LibreYOLO("LibreYOLO9t.yaml")
    outcome = model.train(data=str(mini_shapes), project=str(tmp_path_factory.mktemp("runs")), imgsz=64, batch=8,
                          workers=0, epochs=1, close_mosaic=0, plots=True, verbose=False, device="cpu")
    return model, outcome


@pytest.mark.slow  # the shared run: one epoch with every plot, ~10 s on a busy CPU
def test_results_csv_holds_validation_losses_beside_training_losses(run) -> None:
    _, outcome = run
    with (outcome.run_dir / "results.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    for row in rows:
        for term in ("box", "cls", "dfl"):
            value = float(row[f"val/{term}_loss"])
            assert math.isfinite(value) and value > 0, (term, value)
            assert float(row[f"train/{term}_loss"]) > 0
    assert (outcome.run_dir / "results.png").is_file()


@pytest.mark.slow  # the shared run: one epoch with every plot, ~10 s on a busy CPU
def test_last_validation_draws_its_first_batches_beside_the_training_batches(run) -> None:
    _, outcome = run
    names = sorted(p.name for p in outcome.run_dir.glob("val_batch*.jpg"))
    assert names == ["val_batch0_labels.jpg", "val_batch0_pred.jpg"]     # 8 val images at batch 16: one batch
    assert (outcome.run_dir / "train_batch0.jpg").is_file()
    for name in names:
        with Image.open(outcome.run_dir / name) as im:
            assert im.size == (192, 192) and np.asarray(im.convert("L")).std() > 0   # 8 tiles of 64 on 3 x 3


@pytest.mark.slow  # the shared run: one epoch with every plot, ~10 s on a busy CPU
def test_val_with_plots_writes_the_batch_pictures(run, mini_shapes, tmp_path) -> None:
    model, _ = run
    model.val(data=str(mini_shapes), imgsz=64, batch=4, workers=0, device="cpu", plots=True,
              project=str(tmp_path), verbose=False)
    names = sorted(p.name for p in (tmp_path / "exp").glob("val_batch*.jpg"))
    assert names == ["val_batch0_labels.jpg", "val_batch0_pred.jpg", "val_batch1_labels.jpg", "val_batch1_pred.jpg"]
    metrics = model.val(data=str(mini_shapes), imgsz=64, workers=0, device="cpu", verbose=False)
    assert not any(k.startswith("val/") for k in metrics.as_dict())       # model.val computes no loss


def test_prediction_pictures_show_only_confident_boxes(tmp_path) -> None:
    images = torch.full((2, 3, 32, 32), 0.5)
    dets = [torch.tensor([[4.0, 4, 20, 20, 0.9, 0], [8, 8, 30, 30, 0.1, 0]]), torch.zeros((0, 6))]
    path = plot_predictions(images, dets, {0: "a"}, tmp_path / "p.jpg")
    with Image.open(path) as im:
        pixels = np.asarray(im.convert("RGB")).astype(int)
    assert pixels[4, 12].std() > 0 or abs(pixels[4, 12] - 128).max() > 20    # the 0.9 box's top edge is drawn
    assert np.abs(pixels[29, 20] - 128).max() < 20                           # the 0.1 box's bottom edge is not


def test_loss_meter_averages_and_a_failing_loss_leaves_the_columns_out() -> None:
    calls = iter([torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0])])
    meter = LossMeter(lambda images, targets: next(calls), ("box", "cls"))
    meter.update(torch.zeros(1), None)
    meter.update(torch.zeros(1), None)
    assert meter.result() == {"val/box_loss": 2.0, "val/cls_loss": 3.0}

    def broken(images, targets):
        raise RuntimeError("needs training mode")
    failing = LossMeter(broken, ("box",))
    failing.update(torch.zeros(1), None)
    assert failing.result() == {}
