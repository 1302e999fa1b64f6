"""EC end to end on the CPU through the ``libreyolo`` command: train a step or two of size s
at a tiny image size (split training: backbone + encoder in the seam, the decoder with its denoising queries after it), then
validate, predict and inspect the checkpoint it wrote; the family's recipe is what the run records."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch
import yaml


@pytest.fixture(scope="module")
def tiny_shapes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from libreyolo_models.data.shapes import generate_shapes

    root = tmp_path_factory.mktemp("tiny-shapes")
    generate_shapes(root, split_sizes={"train": 4, "val": 2})
    return root / "data.yaml"


@pytest.mark.slow  # ~10 s idle, more on a loaded 2-core machine
@pytest.mark.timeout(600)
def test_cli_trains_ec_s_at_tiny_size_then_validates_and_predicts(tiny_shapes: Path, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture) -> None:
    from libreyolo import LibreEC, LibreYOLO
    from libreyolo_cli.main import main

    code = main(["train", "model=LibreECs.yaml", f"data={tiny_shapes}", "epochs=1", "imgsz=64", "batch=2",
                 "nbs=2", "workers=0", "device=cpu", f"project={tmp_path}", "name=cli", "--no-verbose", "--no-plots"])
    assert code == 0, capsys.readouterr().err
    run = tmp_path / "cli"
    with (run / "results.csv").open() as fh:
        (row,) = list(csv.DictReader(fh))
    losses = [float(row[f"train/{name}_loss"]) for name in ("mal", "bbox", "giou", "fgl")]
    assert all(v > 0 and v == v for v in losses), row  # finite, positive: every term ran
    args = yaml.safe_load((run / "args.yaml").read_text())
    assert (args["optimizer"], args["lr0"], args["max_grad_norm"], args["mosaic"]) == ("AdamW", 5e-4, 0.1, 0.75)
    assert (args["epochs"], args["imgsz"], args["batch"]) == (1, 64, 2)  # the command line over the recipe
    ckpt = torch.load(run / "weights" / "best.pt", weights_only=True)
    assert (ckpt["model_family"], ckpt["size"], ckpt["nc"]) == ("ec", "s", 5)
    assert isinstance(LibreEC(run / "weights" / "best.pt"), LibreYOLO)
    best = str(run / "weights" / "best.pt")
    assert main(["val", f"model={best}", f"data={tiny_shapes}", "imgsz=64", "workers=0", "--no-verbose"]) == 0
    assert main(["predict", f"model={best}", "imgsz=64", "conf=0.0"]) == 0
    assert main(["info", f"model={best}"]) == 0
    out = capsys.readouterr().out
    assert "family: ec" in out and "mAP50=" in out
