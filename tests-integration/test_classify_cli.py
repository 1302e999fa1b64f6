"""A classifier through the ``libreyolo`` command: the task follows from the family's name."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_train_val_predict_info_for_a_classifier(mini_shapes_cls: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture) -> None:
    from libreyolo_cli.main import main

    code = main(["train", "model=LibreEfficientNetV2b0.yaml", f"data={mini_shapes_cls}", "epochs=1", "imgsz=32",
                 "batch=8", "workers=0", "device=cpu", f"project={tmp_path}", "name=cli", "--no-verbose",
                 "--no-plots", "mixup=0.2"])
    assert code == 0, capsys.readouterr().err
    best = tmp_path / "cli" / "weights" / "best.pt"
    assert best.is_file()
    assert main(["val", f"model={best}", f"data={mini_shapes_cls}", "imgsz=32", "workers=0", "--no-verbose"]) == 0
    crops = mini_shapes_cls.parent / "val" / "circle"
    assert main(["predict", f"model={best}", f"source={crops}", "imgsz=32"]) == 0
    assert main(["info", f"model={best}"]) == 0
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "accuracy_top1=" in out and "task: classify" in out and "family: efficientnetv2" in out
    assert "circle" in out.split("accuracy_top1=")[1]  # predict printed each crop's top classes
    rows = [line.split() for line in out.splitlines() if line.startswith(("efficientnetv2 ", "resnet "))]
    listing = {row[0]: row[1:3] for row in rows}  # the family listing: name, task, sizes
    assert listing == {"efficientnetv2": ["classify", "b0,b1,b2,b3"], "resnet": ["classify", "18,34,50,101"]}
