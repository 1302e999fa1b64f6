"""YOLOX trained from the command line, end to end (tiny): ``libreyolo train model=LibreYOLOXn.yaml``."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch

from libreyolo_cli.main import EXIT_OK, main


def test_cli_trains_yolox_n_one_epoch_and_the_checkpoint_predicts(tmp_path: Path, mini_shapes: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", "model=LibreYOLOXn.yaml", f"data={mini_shapes}", "epochs=1", "close_mosaic=1", "imgsz=64",
                 "batch=8", "workers=0", "device=cpu", f"project={tmp_path}", "name=yolox", "--no-plots"])
    assert code == EXIT_OK, capsys.readouterr().err
    assert "trained 1 epochs" in capsys.readouterr().out
    run = tmp_path / "yolox"
    with (run / "results.csv").open() as fh:
        (row,) = list(csv.DictReader(fh))
    losses = {k: float(row[f"train/{k}_loss"]) for k in ("iou", "obj", "cls", "l1")}
    assert all(v == v and v >= 0 for v in losses.values()) and losses["obj"] > 0
    assert losses["l1"] > 0  # close_mosaic=1 (the recipe's 15 would be capped to 0 epochs of 1): L1 on
    ckpt = torch.load(run / "weights" / "best.pt", weights_only=True)
    assert (ckpt["model_family"], ckpt["size"], ckpt["nc"], ckpt["imgsz"]) == ("yolox", "n", 5, 64)
    args = (run / "args.yaml").read_text()
    assert "lr0: 0.01" in args and "optimizer: SGD" in args and "amp: false" in args  # the family's recipe
    assert "max_grad_norm: 10.0" in args and "close_mosaic: 1" in args  # the user's close_mosaic kept
    assert main(["predict", f"model={run / 'weights' / 'best.pt'}", "imgsz=64", "conf=0.001"]) == EXIT_OK
