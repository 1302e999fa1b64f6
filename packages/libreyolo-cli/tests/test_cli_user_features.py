"""Issue 46's options from the command line: tiled and augmented predict, trackers by name,
and their usage errors (exit 2, one line)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from libreyolo_cli.main import EXIT_OK, EXIT_USAGE, main


@pytest.fixture()
def picture(tmp_path):
    path = tmp_path / "big.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (300, 400, 3), dtype=np.uint8)).save(path)
    return path


@pytest.mark.parametrize("words", [["tile=128", "tile_overlap=0.25", "tile_merge=weighted"], ["--augment"]])
def test_tiled_and_augmented_predict_print_one_line(words, picture, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["predict", "model=LibreYOLO9t.yaml", f"source={picture}", "imgsz=64", "device=cpu", *words])
    assert code == EXIT_OK
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert line.startswith(str(picture)) and line.endswith(" ms)")


@pytest.mark.parametrize(("words", "message"), [
    (["predict", "model=LibreYOLO9t.yaml", "tile=128", "--augment"], "tile= and augment=True together"),
    (["predict", "model=LibreYOLO9t.yaml", "tile=8"], "tile=8 must be a window side of at least 32"),
    (["train", "model=LibreYOLO9t.yaml", "data=shapes", "fraction=2"], "fraction=2.0 must be in (0, 1]"),
    (["track", "model=LibreYOLO9t.yaml", "source=x.mp4", "tracker=botsort", "cmc_method=orb"], "cmc_method='orb'"),
])
def test_bad_values_exit_2_naming_them(words, message, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(words) == EXIT_USAGE
    assert message in capsys.readouterr().err
