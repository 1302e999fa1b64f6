"""``libreyolo track``: help, a run over frames, and its usage errors."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from libreyolo_cli.main import EXIT_OK, EXIT_USAGE, main


def test_track_help_lists_tracker_and_predict_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["track", "--help"]) == EXIT_OK
    out = capsys.readouterr().out
    for text in ("libreyolo track model=... source=... tracker=bytetrack", "track_buffer=30",
                 "track_high_thresh=0.5", "new_track_thresh=0.6", "match_thresh=0.8", "conf=0.25"):
        assert text in out, text
    assert main(["--help"]) == EXIT_OK and "libreyolo track model=" in capsys.readouterr().out


def test_track_prints_one_line_per_frame_with_ids(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    frames = tmp_path / "frames"
    frames.mkdir()
    rng = np.random.default_rng(0)
    image = rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)
    for i in range(3):
        Image.fromarray(image).save(frames / f"{i:03d}.png")
    code = main(["track", "model=LibreYOLO9t.yaml", f"source={frames}", "imgsz=64", "track_buffer=5",
                 "--save", f"project={tmp_path}"])
    assert code == EXIT_OK
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == [str(frames / f"{i:03d}.png") for i in range(3)]
    assert all(" tracked, ids [" in line for line in lines)
    assert sorted(p.name for p in (tmp_path / "exp").iterdir()) == ["000.jpg", "001.jpg", "002.jpg"]


@pytest.mark.parametrize(("words", "message"), [
    (["track", "model=LibreYOLO9t.yaml"], "needs source="),
    (["track", "model=LibreYOLO9t.yaml", "source=x.mp4", "tracker=botsrot"], "did you mean 'botsort'"),
    (["track", "model=LibreYOLO9t.yaml", "source=x.mp4", "track_bufer=3"], "did you mean 'track_buffer'"),
    (["track", "model=LibreYOLO9t.yaml", "source=x.mp4", "--persist"], "does not take persist="),
])
def test_track_usage_errors_exit_2_with_the_fix(capsys, words, message) -> None:
    assert main(words) == EXIT_USAGE
    assert message in capsys.readouterr().err
