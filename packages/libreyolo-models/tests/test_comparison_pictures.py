"""``val(plots=True)`` of the picture-out tasks (matte, restore) draws ``val_batch*_pred.jpg``: per
image, what went in, what came out and what was expected, side by side."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from libreyolo_models import LibreYOLO
from libreyolo_models.tasks.comparison_pictures import GAP, panel, save_comparison
from libreyolo_models.tasks.matte.shapes_matte import generate_shapes_matte
from libreyolo_models.tasks.restore.shapes_restore import generate_shapes_restore


def test_rows_of_panels_at_the_first_panels_size(tmp_path: Path) -> None:
    picture = torch.rand(3, 20, 30)
    alpha = torch.zeros(20, 30)
    alpha[:, 15:] = 1.0
    truth = np.full((40, 60), 255, np.uint8)  # another size, 8-bit: resized and scaled
    save_comparison(tmp_path, 0, [(picture, alpha, truth)] * 2)
    canvas = np.asarray(Image.open(tmp_path / "val_batch0_pred.jpg"))
    assert canvas.shape == (2 * 20 + GAP, 3 * 30 + 2 * GAP, 3)
    assert panel(truth, (20, 30)).min() == 255 and panel(alpha, (20, 30))[:, :15].max() == 0
    save_comparison(tmp_path, 3, [(picture,)])  # only batches 0-2
    assert not (tmp_path / "val_batch3_pred.jpg").exists()


@pytest.mark.parametrize("case", ["matte", "restore"])
def test_val_plots_draw_the_first_batches(case: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    if case == "matte":
        generate_shapes_matte(data, split_sizes={"train": 1, "val": 3})
        model = LibreYOLO("LibreBiRefNett.yaml", imgsz=64)
    else:
        generate_shapes_restore(data, split_sizes={"train": 1, "val": 3})
        model = LibreYOLO("LibreNAFNett.yaml", imgsz=64)
    model.val(data=str(data / "data.yaml"), imgsz=64, batch=2, plots=True, project=str(tmp_path / "runs"), name="v",
              verbose=False)
    written = {p.name for p in (tmp_path / "runs" / "v").iterdir()}
    # three pictures in batches of two (restore batches pictures of one size: up to three batches)
    assert "val_batch0_pred.jpg" in written and written <= {f"val_batch{i}_pred.jpg" for i in range(3)}
    first = Image.open(tmp_path / "runs" / "v" / "val_batch0_pred.jpg")
    assert first.width > 3 * first.height // 2  # three panels side by side
