"""``libreyolo val`` shows the metrics table once: validation logs it when verbose (the default),
the command prints it when not, and the ``key=value`` line always follows."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.mark.parametrize("extra", [[], ["--no-verbose"], ["verbose=False"]], ids=["default", "flag", "key"])
def test_val_shows_the_table_once(extra: list[str], mini_shapes: Path, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from libreyolo_cli.main import main
    from libreyolo_models import LibreYOLO

    weights = LibreYOLO("LibreYOLO9t.yaml", nc=5).save(tmp_path / "y.pt")
    with caplog.at_level(logging.INFO):
        assert main(["val", f"model={weights}", f"data={mini_shapes}", "imgsz=64", "workers=0", *extra]) == 0
    captured = capsys.readouterr()
    shown = captured.out + caplog.text  # what the terminal shows: the command's lines and the log
    assert shown.count("Instances") == 1, shown
    assert "mAP50=" in captured.out
