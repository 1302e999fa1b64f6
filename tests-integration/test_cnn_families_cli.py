"""YOLOv9-E2E, DAMO-YOLO and YOLOv7 end to end through the CLI (issue 40): train one tiny epoch from
the architecture name, then validate, predict, export and inspect the checkpoint; ``libreyolo
info`` lists each family with its sync_bn default."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from libreyolo_cli.main import EXIT_OK, main

# family -> (architecture file, its loss names)
FAMILIES = {
    "yolo9_e2e": ("LibreYOLO9E2Et.yaml", ("box", "cls", "dfl")),
    "damoyolo": ("LibreDAMOYOLOns.yaml", ("cls", "box", "dfl")),
    "yolo7": ("LibreYOLO7tiny.yaml", ("box", "obj", "cls")),
}


def test_info_lists_each_family_with_sync_bn_on_and_spawn(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", "--json"]) == EXIT_OK
    rows = {r["family"]: r for r in json.loads(capsys.readouterr().out)}
    for family in FAMILIES:
        assert rows[family]["sync_bn"] is True and rows[family]["multi_gpu_spawn"] is True, rows[family]


@pytest.mark.slow  # 15-40 s each on a loaded 2-core machine
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_cli_trains_validates_predicts_and_exports(family: str, mini_shapes: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    arch, losses = FAMILIES[family]
    code = main(["train", f"model={arch}", f"data={mini_shapes}", "epochs=1", "imgsz=64", "batch=4", "nbs=4",
                 "workers=0", "device=cpu", f"project={tmp_path}", "name=run", "--no-plots"])
    assert code == EXIT_OK, capsys.readouterr().err
    run = tmp_path / "run"
    with (run / "results.csv").open() as fh:
        (row,) = list(csv.DictReader(fh))
    values = [float(row[f"train/{name}_loss"]) for name in losses]
    assert all(v == v and v >= 0 for v in values) and sum(values) > 0, row
    best = run / "weights" / "best.pt"
    ckpt = torch.load(best, weights_only=True)
    assert (ckpt["model_family"], ckpt["nc"], ckpt["imgsz"]) == (family, 5, 64)
    assert main(["val", f"model={best}", f"data={mini_shapes}", "imgsz=64", "workers=0", "--no-verbose"]) == EXIT_OK
    assert main(["predict", f"model={best}", "imgsz=64", "conf=0.0"]) == EXIT_OK
    assert main(["export", f"model={best}", "format=onnx", "imgsz=64"]) == EXIT_OK
    assert main(["info", f"model={best}"]) == EXIT_OK
    assert f"family: {family}" in capsys.readouterr().out
