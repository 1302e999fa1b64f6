"""The family contract holds: a detector defined in this folder (``toy_family/``), joined through
the public ``register_family``, trains, validates, predicts, saves and loads through the facade
and the CLI, with its own loss terms, gains and recipe, and no file of the zoo changed."""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from libreyolo_models import ConfigError, LibreYOLO, register_family, unregister_family

sys.path.insert(0, str(Path(__file__).parent))
from toy_family import SPEC  # noqa: E402

FAST = {"epochs": 2, "imgsz": 64, "batch": 8, "workers": 0, "device": "cpu", "verbose": False, "plots": False,
        "close_mosaic": 1}


@pytest.fixture
def toy() -> Iterator[None]:
    register_family(SPEC)
    try:
        yield
    finally:
        unregister_family(SPEC.name)


def test_toy_family_trains_validates_predicts_and_round_trips(toy, mini_shapes: Path, tmp_path: Path) -> None:
    from libreyolo_models import SAMPLE_IMAGE

    model = LibreYOLO(family="toydet", size="s")
    outcome = model.train(data=str(mini_shapes), project=str(tmp_path), gains={"iou": 3.0}, **FAST)
    with (outcome.run_dir / "results.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 and {"train/iou_loss", "train/cls_loss", "metrics/mAP50"} <= set(rows[0])
    assert "train/box_loss" not in rows[0]
    args = yaml.safe_load((outcome.run_dir / "args.yaml").read_text())
    assert args["optimizer"] == "AdamW" and args["lr0"] == 0.003 and args["mosaic"] == 0.0  # the family's recipe
    metrics = model.val(data=str(mini_shapes), imgsz=64, workers=0, verbose=False)
    assert 0.0 <= metrics.map50 <= 1.0 and metrics.n_images == 8
    results = model(SAMPLE_IMAGE, conf=0.0, max_det=5, imgsz=64)
    assert results[0].boxes is not None and len(results[0]) <= 5
    path = model.save(tmp_path / "toy.pt")
    again = LibreYOLO(path)
    assert (again.spec.name, again.size, again.nc, again.names) == ("toydet", "s", model.nc, model.names)
    same = again(SAMPLE_IMAGE, conf=0.0, max_det=5, imgsz=64)
    assert same[0].boxes.data.tolist() == results[0].boxes.data.tolist()
    onnx = LibreYOLO(path).export(format="onnx", file=str(tmp_path / "toy.onnx"))
    exported = LibreYOLO(onnx)(SAMPLE_IMAGE, conf=0.0, max_det=5, imgsz=64)[0]
    assert exported.boxes.cls.tolist() == results[0].boxes.cls.tolist()
    assert (exported.boxes.xyxy - results[0].boxes.xyxy).abs().max() < 1e-2


def test_gains_the_toy_family_lacks_are_rejected_naming_its_own(toy, mini_shapes: Path, tmp_path: Path) -> None:
    model = LibreYOLO(family="toydet")
    with pytest.raises(ConfigError, match=r"ToyDet \(detect\) has no loss term 'dfl'; its gains are iou=2, cls=1"):
        model.train(data=str(mini_shapes), project=str(tmp_path), dfl=1.5, **FAST)


def test_toy_family_through_the_cli(toy, mini_shapes: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from libreyolo_cli.main import main

    code = main(["train", "model=LibreToyDetn.yaml", f"data={mini_shapes}", "epochs=1", "imgsz=64", "batch=8",
                 "workers=0", "device=cpu", f"project={tmp_path}", "name=cli", "--no-verbose", "--no-plots"])
    assert code == 0, capsys.readouterr().err
    best = tmp_path / "cli" / "weights" / "best.pt"
    assert best.is_file()
    assert main(["val", f"model={best}", f"data={mini_shapes}", "imgsz=64", "workers=0", "--no-verbose"]) == 0
    assert main(["predict", f"model={best}", "imgsz=64", "conf=0.0"]) == 0
    assert main(["info", f"model={best}"]) == 0
    assert main(["export", f"model={best}", "format=onnx", f"file={tmp_path / 'toy.onnx'}"]) == 0
    assert main(["predict", f"model={tmp_path / 'toy.onnx'}", "imgsz=64", "conf=0.0"]) == 0
    out = capsys.readouterr().out
    assert "family: toydet" in out and "mAP50=" in out


def test_unregistered_family_checkpoint_names_the_fix(toy, tmp_path: Path) -> None:
    from libreyolo_models import CheckpointError

    path = LibreYOLO(family="toydet").save(tmp_path / "toy.pt")
    unregister_family("toydet")
    with pytest.raises(CheckpointError, match="family 'toydet', which this version.*register_family"):
        LibreYOLO(path)
