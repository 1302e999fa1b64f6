"""The semantic task end to end: SegFormer trains, validates, predicts, saves and loads through the
facade and the CLI; validation measures exactly what predict returns."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from PIL import Image

from libreyolo_models import ConfigError, LibreYOLO
from libreyolo_models.tasks.semantic.metrics import SemanticMetrics

FAST = {"epochs": 2, "imgsz": 64, "batch": 4, "workers": 0, "device": "cpu", "verbose": False, "plots": False,
        "lr0": 1e-3}


@pytest.fixture(scope="module")
def mini_seg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from libreyolo_models.tasks.semantic.shapes_seg import generate_shapes_seg

    root = tmp_path_factory.mktemp("mini-shapes-seg")
    generate_shapes_seg(root, split_sizes={"train": 8, "val": 4})
    return root / "data.yaml"


@pytest.fixture(scope="module")
def trained(mini_seg: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[LibreYOLO, object]:
    model = LibreYOLO("LibreSegFormerb0.yaml")
    outcome = model.train(data=str(mini_seg), project=str(tmp_path_factory.mktemp("runs")), **FAST)
    return model, outcome


def test_training_logs_the_task_s_columns_and_the_family_s_recipe(trained) -> None:  # noqa: ANN001
    model, outcome = trained
    with (outcome.run_dir / "results.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 and {"train/ce_loss", "metrics/mIoU", "metrics/pixel_accuracy", "fitness"} <= set(rows[0])
    assert "metrics/mAP50" not in rows[0] and all(float(r["fitness"]) == float(r["metrics/mIoU"]) for r in rows)
    args = yaml.safe_load((outcome.run_dir / "args.yaml").read_text())
    assert (args["optimizer"], args["lrf"], args["weight_decay"], args["lr0"]) == ("AdamW", 0.0, 0.01, 1e-3)
    best = torch.load(outcome.best, weights_only=True)
    assert best["task"] == "semantic" and best["model_family"] == "segformer" and best["best_metric_name"] == "mIoU"
    assert best["best_mIoU"] == pytest.approx(max(float(r["metrics/mIoU"]) for r in rows), abs=1e-6)  # csv rounds
    assert (model.nc, model.names[0], model.names[5]) == (6, "background", "cross")


def test_val_reproduces_the_best_epoch_and_equals_metrics_of_predicted_masks(trained, mini_seg: Path) -> None:  # noqa: ANN001
    model, outcome = trained
    result = model.val(data=str(mini_seg), imgsz=64, workers=0, verbose=False)
    # The instance holds the best epoch's (EMA) weights: validating them gives that epoch's mIoU again.
    assert result.n_images == 4
    assert result.miou == pytest.approx(torch.load(outcome.best, weights_only=True)["best_mIoU"], abs=1e-12)
    root = mini_seg.parent
    images = sorted((root / "images" / "val").glob("*.jpg"))
    predicted = model(images, imgsz=64)
    by_hand = SemanticMetrics(model.nc)
    for res, path in zip(predicted, images):
        truth = torch.from_numpy(np.array(Image.open(root / "masks" / "val" / f"{path.stem}.png")))
        assert res.masks.data.shape == truth.shape == res.orig_shape
        by_hand.update(res.masks.data, truth)
    assert by_hand.compute().miou == pytest.approx(result.miou, abs=1e-12)


def test_predict_plot_save_and_load_give_the_same_masks(trained, mini_seg: Path, tmp_path: Path) -> None:  # noqa: ANN001
    model, _ = trained
    image = next((mini_seg.parent / "images" / "val").glob("*.jpg"))
    (res,) = model(image, imgsz=64)
    assert res.boxes is None and res.masks.data.dtype == torch.int64
    assert set(res.masks.classes()) <= set(range(6)) and "%" in res.summary()
    assert res.plot().shape == (*res.orig_shape, 3) and sum(row["share"] for row in res.to_list()) == pytest.approx(1)
    path = model.save(tmp_path / "seg.pt")
    again = LibreYOLO(path)
    assert (again.spec.name, again.size, again.task, again.nc, again.names) == ("segformer", "b0", "semantic", 6,
                                                                              model.names)
    (same,) = again(image, imgsz=64)
    assert torch.equal(same.masks.data, res.masks.data)
    with pytest.raises(ConfigError, match=r"classes=\[1\] filters detections; a semantic model labels every pixel"):
        model(image, imgsz=64, classes=[1])
    saved = res.save(tmp_path / "overlay.jpg")
    assert Image.open(saved).size == (res.orig_shape[1], res.orig_shape[0])


def test_segformer_through_the_cli(mini_seg: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from libreyolo_cli.main import main

    code = main(["train", "model=LibreSegFormerb0.yaml", f"data={mini_seg}", "epochs=1", "imgsz=64", "batch=4",
                 "workers=0", "device=cpu", "lr0=0.001", f"project={tmp_path}", "name=cli", "--no-verbose",
                 "--no-plots"])
    assert code == 0, capsys.readouterr().err
    best = tmp_path / "cli" / "weights" / "best.pt"
    assert best.is_file()
    assert main(["val", f"model={best}", f"data={mini_seg}", "imgsz=64", "workers=0", "--no-verbose"]) == 0
    image = next((mini_seg.parent / "images" / "val").glob("*.jpg"))
    assert main(["predict", f"model={best}", f"source={image}", "imgsz=64"]) == 0
    assert main(["info", f"model={best}"]) == 0
    assert main(["info"]) == 0  # the family listing
    out = capsys.readouterr().out
    assert any(line.split()[:2] == ["segformer", "semantic"] and "LibreSegFormerb0.pt" in line
               for line in out.splitlines())
    assert "mIoU=" in out and "pixel_accuracy=" in out and "task: semantic" in out and "family: segformer" in out
    assert f"{image}: " in out and "%" in out


@pytest.mark.slow  # generates the 500-image set once (about 15 s on 2 cores)
def test_bundled_shapes_seg_name_resolves_for_training_data() -> None:
    from libreyolo_models.tasks import get_task

    config = get_task("semantic").load_data("shapes-seg")
    assert config.nc == 6 and Path(config.source).parent.name.startswith("shapes-seg")
    assert len(list((config.root / "masks" / "val").glob("*.png"))) == 100
