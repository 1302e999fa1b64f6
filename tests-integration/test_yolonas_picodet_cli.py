"""YOLO-NAS and PicoDet end to end through the CLI: train from the architecture name, then validate,
predict, export and inspect the checkpoint it wrote; the family's recipe is what the run records."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml

# family weights name -> (its loss names, the recipe values args.yaml must record)
CASES = {
    "LibreYOLONASs": (("cls", "iou", "dfl"), {"optimizer": "AdamW", "lr0": 5e-4, "weight_decay": 1e-5}),
    "LibrePICODETs": (("cls", "box", "dfl"), {"optimizer": "SGD", "lr0": 0.1 / 16, "weight_decay": 4e-5 * 16}),
}


@pytest.mark.slow  # ~15-30 s each on a loaded 2-core machine
@pytest.mark.parametrize("name", list(CASES))
def test_family_trains_validates_predicts_and_exports_through_the_cli(name: str, mini_shapes: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture) -> None:
    from libreyolo_cli.main import main

    losses, recipe = CASES[name]
    code = main(["train", f"model={name}.yaml", f"data={mini_shapes}", "epochs=1", "imgsz=64", "batch=4", "nbs=4",
                 "workers=0", "device=cpu", f"project={tmp_path}", "name=cli", "--no-verbose", "--no-plots"])
    assert code == 0, capsys.readouterr().err
    run = tmp_path / "cli"
    with (run / "results.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 1 and {f"train/{n}_loss" for n in losses} | {"metrics/mAP50"} <= set(rows[0])
    args = yaml.safe_load((run / "args.yaml").read_text())
    assert {k: args[k] for k in recipe} == pytest.approx(recipe)
    assert (args["epochs"], args["imgsz"], args["nbs"]) == (1, 64, 4)
    best = run / "weights" / "best.pt"
    assert main(["val", f"model={best}", f"data={mini_shapes}", "imgsz=64", "workers=0", "--no-verbose"]) == 0
    assert main(["predict", f"model={best}", "imgsz=64", "conf=0.0"]) == 0
    assert main(["export", f"model={best}", "format=onnx", "imgsz=64"]) == 0
    assert (run / "weights" / "best.onnx").is_file()
    assert main(["info", f"model={best}"]) == 0
    out = capsys.readouterr().out
    family = "yolonas" if "NAS" in name else "picodet"
    assert f"family: {family}" in out and "mAP50=" in out
    assert main(["info"]) == 0
    listing = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert [family, "detect", "s,m,l", f"{name}.pt"] in [row[:4] for row in listing]
