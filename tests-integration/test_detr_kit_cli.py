"""The five DETR-kit families end to end on the CPU through the ``libreyolo`` command, as the issue's
acceptance line runs them (``libreyolo train model=LibreDFINEn.yaml data=shapes epochs=1 imgsz=128
batch=4 nbs=4 device=cpu``), here on a tiny shapes set: train (split seams: backbone + encoder,
then the decoder head with denoising queries, in one module), validate, predict, inspect."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="module")
def tiny_shapes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from libreyolo_models.data.shapes import generate_shapes

    root = tmp_path_factory.mktemp("tiny-shapes")
    generate_shapes(root, split_sizes={"train": 8, "val": 2})
    return root / "data.yaml"


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize(("model", "family"), [("LibreDFINEn.yaml", "dfine"), ("LibreDEIMn.yaml", "deim"),
                                               ("LibreRTDETRv4s.yaml", "rtdetrv4"), ("LibreRTDETRv2r18.yaml", "rtdetrv2"),
                                               ("LibreDEIMv2atto.yaml", "deimv2")])
def test_cli_trains_validates_predicts_and_inspects(model: str, family: str, tiny_shapes: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture) -> None:
    from libreyolo_cli.main import main

    code = main(["train", f"model={model}", f"data={tiny_shapes}", "epochs=1", "imgsz=128", "batch=4", "nbs=4",
                 "workers=0", "device=cpu", f"project={tmp_path}", "name=cli", "--no-verbose", "--no-plots"])
    assert code == 0, capsys.readouterr().err
    run = tmp_path / "cli"
    with (run / "results.csv").open() as fh:
        (row,) = list(csv.DictReader(fh))
    losses = [float(v) for k, v in row.items() if k.startswith("train/") and k.endswith("_loss") and k != "train/loss"]
    assert losses and all(v == v and v >= 0 for v in losses), row
    ckpt = torch.load(run / "weights" / "best.pt", weights_only=True)
    assert (ckpt["model_family"], ckpt["nc"]) == (family, 5)
    best = str(run / "weights" / "best.pt")
    assert main(["val", f"model={best}", f"data={tiny_shapes}", "imgsz=128", "workers=0", "--no-verbose"]) == 0
    assert main(["predict", f"model={best}", "imgsz=128", "conf=0.0"]) == 0
    assert main(["info", f"model={best}"]) == 0
    out = capsys.readouterr().out
    assert f"family: {family}" in out and "mAP50=" in out
