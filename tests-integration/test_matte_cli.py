"""The matte task through the command line: BiRefNet-T (untrained, 64 px) validates on a few
``shapes-matte`` pictures and predicts with ``--save``, which writes the RGBA cut-out and the alpha
(training through the same job is covered by test_matte_task.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from libreyolo_models import SAMPLE_IMAGE


def test_birefnet_validates_and_predicts_with_save(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from libreyolo_cli.main import main
    from libreyolo_models.tasks.matte.shapes_matte import generate_shapes_matte

    generate_shapes_matte(tmp_path, split_sizes={"train": 1, "val": 2})
    assert main(["val", "model=LibreBiRefNett.yaml", f"data={tmp_path / 'data.yaml'}", "imgsz=64", "batch=2",
                 "workers=0", "--no-verbose"]) == 0, capsys.readouterr().err
    assert main(["predict", "model=LibreBiRefNett.yaml", f"source={SAMPLE_IMAGE}", "imgsz=64", "--save",
                 f"project={tmp_path}", "name=matte"]) == 0
    out = capsys.readouterr().out
    assert "S-measure" in out and "alpha matte 480x360" in out
    cutout = np.asarray(Image.open(tmp_path / "matte" / "sample.png"))
    alpha = np.asarray(Image.open(tmp_path / "matte" / "sample_alpha.png"))
    assert cutout.shape == (360, 480, 4) and alpha.shape == (360, 480)
    assert np.array_equal(cutout[..., 3], alpha)
    assert np.array_equal(cutout[..., :3], np.asarray(Image.open(SAMPLE_IMAGE).convert("RGB")))
