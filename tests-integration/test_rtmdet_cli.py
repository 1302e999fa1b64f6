"""RTMDet end to end through the CLI: train from the architecture name, then validate, predict and
inspect the checkpoint it wrote; the family's recipe is what the run records."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml


@pytest.mark.slow  # ~20 s on a loaded 2-core machine
def test_rtmdet_trains_validates_and_predicts_through_the_cli(mini_shapes: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture) -> None:
    from libreyolo_cli.main import main

    code = main(["train", "model=LibreRTMDett.yaml", f"data={mini_shapes}", "epochs=1", "imgsz=64", "batch=8",
                 "workers=0", "device=cpu", f"project={tmp_path}", "name=cli", "--no-verbose", "--no-plots"])
    assert code == 0, capsys.readouterr().err
    run = tmp_path / "cli"
    with (run / "results.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 1 and {"train/cls_loss", "train/box_loss", "metrics/mAP50"} <= set(rows[0])
    assert float(rows[0]["train/cls_loss"]) > 0
    args = yaml.safe_load((run / "args.yaml").read_text())
    assert (args["optimizer"], args["lr0"], args["nbs"], args["weight_decay"], args["warmup_bias_lr"]) == (
        "AdamW", 0.004, 256, 0.05, 0.0)  # RTMDet's recipe, under the command line's epochs and imgsz
    assert (args["epochs"], args["imgsz"]) == (1, 64)
    best = run / "weights" / "best.pt"
    assert main(["val", f"model={best}", f"data={mini_shapes}", "imgsz=64", "workers=0", "--no-verbose"]) == 0
    assert main(["predict", f"model={best}", "imgsz=64", "conf=0.0"]) == 0
    assert main(["info", f"model={best}"]) == 0
    out = capsys.readouterr().out
    assert "family: rtmdet" in out and "mAP50=" in out
