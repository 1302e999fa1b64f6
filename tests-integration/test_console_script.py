"""The installed ``libreyolo`` console script, run as a user would (one subprocess: torch import is slow)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def _libreyolo() -> list[str]:
    script = Path(sys.executable).parent / "libreyolo"
    if script.is_file():
        return [str(script)]
    found = shutil.which("libreyolo")
    if not found:
        pytest.skip("the libreyolo console script is not installed in this environment")
    return [found]


def test_console_script_predicts_on_the_sample_image(tmp_path: Path) -> None:
    env = dict(os.environ, LIBREYOLO_HUB_URL="http://127.0.0.1:9")
    proc = subprocess.run([*_libreyolo(), "predict", "model=LibreYOLO9t.yaml", "imgsz=64", "--save",
                           f"project={tmp_path}"], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "sample.jpg" in proc.stdout
    assert (tmp_path / "exp" / "sample.jpg").is_file()
    bad = subprocess.run([*_libreyolo(), "predict", "model=LibreYOLO9t.yaml", "confidence=0.3"],
                         capture_output=True, text=True, timeout=300, env=env)
    assert bad.returncode == 2 and "unknown option 'confidence'" in bad.stderr
