"""``libreyolo predict`` with an OCR model: one summary line per picture and, with ``--save``, the
picture with its text lines drawn."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from libreyolo_cli.main import EXIT_OK, main


def test_predict_saves_an_ocr_picture(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("cv2")
    from PIL import Image

    source = tmp_path / "page.png"
    Image.fromarray(np.full((48, 96, 3), 255, np.uint8)).save(source)
    code = main(["predict", "model=LibrePPOCRm.yaml", f"source={source}", "imgsz=64", "--save",
                 f"project={tmp_path}"])
    assert code == EXIT_OK
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith(str(source)) and "text" in out[0]
    assert (tmp_path / "exp" / "page.jpg").is_file()
