"""The point, restore and depth tasks through the command line: FOMO and NAFNet train, validate
and predict with ``--save``; Depth Anything V2 predicts with ``--save``. The saved pictures show
the result (points drawn, the restored picture, the colour-mapped depth)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from libreyolo_models import SAMPLE_IMAGE

QUICK = ["epochs=1", "batch=4", "workers=0", "device=cpu", "--no-verbose", "--no-plots"]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from libreyolo_models.tasks.point.shapes_point import generate_shapes_point
    from libreyolo_models.tasks.restore.shapes_restore import generate_shapes_restore

    root = tmp_path_factory.mktemp("task-data")
    (root / "point").mkdir()
    (root / "restore").mkdir()
    generate_shapes_point(root / "point", split_sizes={"train": 8, "val": 4})
    generate_shapes_restore(root / "restore", split_sizes={"train": 8, "val": 2})
    return {"point": root / "point" / "data.yaml", "restore": root / "restore" / "data.yaml"}


def _saved_picture(folder: Path) -> np.ndarray:
    (picture,) = folder.glob("*.jpg")
    return np.asarray(Image.open(picture))


def test_fomo_trains_validates_and_predicts_with_save(data: dict[str, Path], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture) -> None:
    from libreyolo_cli.main import main

    assert main(["train", "model=LibreFOMO035.yaml", f"data={data['point']}", "imgsz=64", f"project={tmp_path}",
                 "name=fomo", *QUICK]) == 0, capsys.readouterr().err
    best = tmp_path / "fomo" / "weights" / "best.pt"
    assert main(["val", f"model={best}", f"data={data['point']}", "imgsz=64", "workers=0", "--no-verbose"]) == 0
    assert main(["predict", f"model={best}", "imgsz=64", "conf=0.0", "max_det=5", "--save", f"project={tmp_path}",
                 "name=fomo-predict"]) == 0
    out = capsys.readouterr().out
    assert "F1" in out and "sample.jpg" in out
    saved = _saved_picture(tmp_path / "fomo-predict")
    original = np.asarray(Image.open(SAMPLE_IMAGE))
    assert saved.shape == original.shape and np.abs(saved.astype(int) - original).max() > 100  # dots were drawn


def test_nafnet_trains_validates_and_predicts_with_save(data: dict[str, Path], tmp_path: Path,
                                                         capsys: pytest.CaptureFixture) -> None:
    from libreyolo_cli.main import main

    assert main(["train", "model=LibreNAFNett.yaml", f"data={data['restore']}", "imgsz=32", f"project={tmp_path}",
                 "name=nafnet", *QUICK]) == 0, capsys.readouterr().err
    best = tmp_path / "nafnet" / "weights" / "best.pt"
    assert main(["val", f"model={best}", f"data={data['restore']}", "workers=0", "--no-verbose"]) == 0
    noisy = next((data["restore"].parent / "val" / "input").glob("*.png"))
    assert main(["predict", f"model={best}", f"source={noisy}", "--save", f"project={tmp_path}",
                 "name=nafnet-predict"]) == 0
    out = capsys.readouterr().out
    assert "PSNR" in out and "restored 256x256" in out
    assert _saved_picture(tmp_path / "nafnet-predict").shape == (256, 256, 3)


def test_depth_anything_predicts_with_save(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from libreyolo_cli.main import main

    assert main(["predict", "model=LibreDepthAnythingV2s.yaml", "imgsz=56", "--save", f"project={tmp_path}",
                 "name=depth"]) == 0
    assert "relative depth" in capsys.readouterr().out
    assert _saved_picture(tmp_path / "depth").shape == (360, 480, 3)
