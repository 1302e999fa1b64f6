"""Issue 38's command-line cases: each ends with one line and the README's exit code."""

from __future__ import annotations

import sys

import pytest

from libreyolo_cli.main import EXIT_FAILED, EXIT_USAGE, main


@pytest.mark.parametrize(("words", "message"), [
    (["val", "model=LibreYOLO9t.yaml", "data=shapes", "conf=5"], r"conf=5.0 is outside [0, 1]"),
    (["val", "model=LibreYOLO9t.yaml", "data=shapes", "iou=nan"], "iou=nan must be a finite number"),
    (["train", "model=LibreYOLO9t.yaml", "data=shapes", "lr0=nan"], "lr0=nan must be a finite number"),
])
def test_val_conf_5_iou_nan_and_train_lr0_nan_exit_2_with_one_line(capsys, words, message) -> None:
    assert main(words) == EXIT_USAGE
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_export_without_the_onnx_extra_is_one_line_naming_the_install(capsys, monkeypatch, tmp_path) -> None:
    monkeypatch.setitem(sys.modules, "onnx", None)  # as if the extra were not installed
    code = main(["export", "model=LibreYOLO9t.yaml", "format=onnx", "imgsz=64", f"file={tmp_path / 'm.onnx'}"])
    err = capsys.readouterr().err
    assert code == EXIT_FAILED and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("libreyolo: MissingExtraError: export(format='onnx') needs the 'onnx' package")
    assert "pip install 'libreyolo[onnx]'" in last
