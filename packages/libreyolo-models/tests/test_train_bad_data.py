"""A run survives bad files: an image that breaks after the dataset check is skipped with its
path and counted in the epoch line; a dataset without a val split trains with val=False."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from libreyolo_models import ConfigError, LibreYOLO
from libreyolo_models.data.shapes import generate_shapes
from libreyolo_models.tasks.detect.datasets import load_split
from libreyolo_models.tasks.detect.task import DetectTask


@pytest.fixture()
def no_val_set(tmp_path: Path) -> Path:
    generate_shapes(tmp_path / "ds", split_sizes={"train": 16})
    (tmp_path / "ds" / "data.yaml").write_text(
        "path: .\ntrain: images/train\nnames: [circle, square, triangle, star, cross]\n")
    return tmp_path / "ds" / "data.yaml"


def test_image_broken_after_the_scan_is_skipped_and_counted_and_val_false_needs_no_val_split(
        no_val_set: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    victim = no_val_set.parent / "images" / "train" / "train_0003.jpg"
    real = DetectTask.load_split

    def scan_then_break(self: DetectTask, data: object, split: str) -> object:
        index = real(self, data, split)
        victim.write_bytes(victim.read_bytes()[:300])  # cut short after the check passed it
        return index

    monkeypatch.setattr(DetectTask, "load_split", scan_then_break)
    with caplog.at_level(logging.INFO):
        outcome = LibreYOLO("LibreYOLO9t.yaml").train(
            data=str(no_val_set), val=False, epochs=1, imgsz=64, batch=5, workers=0, device="cpu",
            project=str(tmp_path / "runs"), plots=False, verbose=False)
    assert outcome.best is not None and outcome.best.is_file() and outcome.epochs_run == 1
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith(f"train: skipped {victim}: ") and "truncated" in m.lower() for m in messages)
    (epoch_line,) = [m for m in messages if m.startswith("epoch 1/1: ")]
    assert epoch_line.endswith("(no validation); 1 image skipped (unreadable, named above)")
    assert "train pipeline: 15 images" in caplog.text  # 16 less the broken one: 3 batches of 5


def test_val_true_without_a_val_split_is_an_error_before_the_scan(no_val_set: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object) -> None:
        raise AssertionError("scanned before the option was checked")

    monkeypatch.setattr(DetectTask, "load_split", boom)
    with pytest.raises(ConfigError, match=r"has no val split, so val=True cannot validate; add a `val:` entry"):
        LibreYOLO("LibreYOLO9t.yaml").train(data=str(no_val_set), epochs=1, device="cpu")


def test_a_folder_listed_twice_counts_its_images_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    generate_shapes(tmp_path, split_sizes={"train": 2, "val": 3})
    (tmp_path / "data.yaml").write_text("train: images/train\nval: [images/val, images/val, images/val/val_0001.jpg]\n"
                                        "names: [circle, square, triangle, star, cross]\n")
    with caplog.at_level(logging.WARNING):
        index = load_split(tmp_path / "data.yaml", "val", cache=False)
    assert [p.name for p in index.images] == ["val_0000.jpg", "val_0001.jpg", "val_0002.jpg"]
    assert "val: 4 image(s) are listed more than once in 'val'" in caplog.text
