"""Every kind of bad data in issue 3 point 2: reported with its path and reason, never a crash later.

Each test builds a tiny YOLO dataset of 32x32 images in ``tmp_path`` and breaks one thing.
"""

from __future__ import annotations

import io
import logging
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from libreyolo_models.data.data_config import DataConfig, load_data_config
from libreyolo_models.data.errors import DataConfigError, EmptySplitError
from libreyolo_models.data.split_index import DataProblem
from libreyolo_models.tasks.detect.datasets import load_split

GOOD_ROW = "0 0.5 0.5 0.25 0.25\n"


def _jpeg_bytes(seed: int = 0) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def _dataset(root: Path, labels: dict[str, str | None], images: dict[str, bytes] | None = None,
             nc: int = 2) -> DataConfig:
    """A train split: one JPEG per label entry (None = no label file), ``images`` overriding bytes."""
    image_dir, label_dir = root / "images" / "train", root / "labels" / "train"
    image_dir.mkdir(parents=True)
    label_dir.mkdir(parents=True)
    for i, (stem, text) in enumerate(labels.items()):
        (image_dir / f"{stem}.jpg").write_bytes(_jpeg_bytes(i))
        if text is not None:
            (label_dir / f"{stem}.txt").write_text(text)
    for name, data in (images or {}).items():
        (image_dir / name).write_bytes(data)
    names = ", ".join(f"c{i}" for i in range(nc))
    (root / "data.yaml").write_text(f"train: images/train\nval: images/train\nnames: [{names}]\n")
    return load_data_config(root / "data.yaml")


def _only_problem(root: Path, labels: dict[str, str | None], **kw: object) -> tuple[DataProblem, list[str]]:
    index = load_split(_dataset(root, labels, **kw), "train", cache=False)  # type: ignore[arg-type]
    (problem,) = index.problems
    return problem, [p.stem for p in index.images]


def _all_decode(paths: list[Path]) -> bool:
    for path in paths:
        with Image.open(path) as im:
            im.load()
    return True


# --- images --------------------------------------------------------------------------------------


def test_truncated_jpeg_is_skipped_with_its_path(tmp_path: Path) -> None:
    cut = _jpeg_bytes(7)[:-200]
    problem, kept = _only_problem(tmp_path, {"a": GOOD_ROW}, images={"cut.jpg": cut})
    assert problem.path == tmp_path / "images" / "train" / "cut.jpg"
    assert problem.skipped and "truncated JPEG" in problem.reason
    assert kept == ["a"]


def test_jpeg_with_data_after_its_end_marker_is_used_with_a_note(tmp_path: Path) -> None:
    appended = _jpeg_bytes(3) + b"camera trailer"
    problem, kept = _only_problem(tmp_path, {"a": GOOD_ROW}, images={"tail.jpg": appended})
    assert not problem.skipped and "no end-of-image marker at its end" in problem.reason
    assert sorted(kept) == ["a", "tail"]


def test_jpeg_missing_only_its_end_marker_is_skipped(tmp_path: Path) -> None:
    problem, kept = _only_problem(tmp_path, {"a": GOOD_ROW}, images={"eoi.jpg": _jpeg_bytes(3)[:-2]})
    assert problem.skipped and "truncated JPEG" in problem.reason
    assert kept == ["a"]


def test_jpeg_zero_padding_after_the_end_marker_is_fine(tmp_path: Path) -> None:
    index = load_split(_dataset(tmp_path, {"a": GOOD_ROW}, images={"a.jpg": _jpeg_bytes(4) + b"\0" * 16}),
                       "train", cache=False)
    assert index.problems == [] and len(index) == 1


def test_corrupt_image_bytes_are_skipped(tmp_path: Path) -> None:
    problem, _ = _only_problem(tmp_path, {"a": GOOD_ROW}, images={"junk.png": b"\x89PNG\r\n\x1a\n" + b"x" * 50})
    assert problem.skipped and problem.path.name == "junk.png"
    assert "corrupt" in problem.reason or "identify" in problem.reason


def test_truncated_png_is_caught_by_verify(tmp_path: Path) -> None:
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(buf, "PNG")
    problem, _ = _only_problem(tmp_path, {"a": GOOD_ROW}, images={"cut.png": buf.getvalue()[:-40]})
    assert problem.skipped and problem.path.name == "cut.png"


def test_unreadable_image_file_is_skipped(tmp_path: Path) -> None:
    cfg = _dataset(tmp_path, {"a": GOOD_ROW})
    (tmp_path / "images" / "train" / "dangling.jpg").symlink_to(tmp_path / "gone.jpg")  # unreadable even as root
    index = load_split(cfg, "train", cache=False)
    (problem,) = index.problems
    assert problem.path.name == "dangling.jpg" and problem.skipped
    assert problem.reason == "cannot read file: No such file or directory"


def test_unreadable_label_file_is_skipped(tmp_path: Path) -> None:
    cfg = _dataset(tmp_path, {"a": GOOD_ROW, "b": None})
    (tmp_path / "labels" / "train" / "b.txt").mkdir()  # a label path that cannot be read as a file
    (problem,) = load_split(cfg, "train", cache=False).problems
    assert problem.path.name == "b.txt" and problem.skipped
    assert problem.reason == "cannot read label file: Is a directory"


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads files whatever their mode")
def test_permission_denied_image_is_skipped(tmp_path: Path) -> None:
    cfg = _dataset(tmp_path, {"a": GOOD_ROW, "locked": GOOD_ROW})
    locked = tmp_path / "images" / "train" / "locked.jpg"
    locked.chmod(0)
    try:
        (problem,) = load_split(cfg, "train", cache=False).problems
    finally:
        locked.chmod(0o644)
    assert problem.path == locked and "Permission denied" in problem.reason


# --- labels --------------------------------------------------------------------------------------


def test_missing_label_file_is_a_background_not_a_problem(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cfg = _dataset(tmp_path, {"a": GOOD_ROW, "bg": None, "empty": ""})
    with caplog.at_level(logging.INFO):
        index = load_split(cfg, "train", cache=False)
    assert index.problems == []
    assert [len(lab) for lab in index.labels] == [1, 0, 0]
    assert [r.levelno for r in caplog.records] == [logging.INFO]  # the summary only, no warning
    assert caplog.records[0].getMessage() == "train: 3 images, 1 boxes, 0 skipped, 2 backgrounds"


@pytest.mark.parametrize(("text", "reason"), [
    ("0 0.5 0.5 0.2\n", "line 1: 4 values"),
    (GOOD_ROW + "1 0.5 0.5 0.2 0.2 0.9\n", "line 2: 6 values"),
    ("0 0.5 abc 0.2 0.2\n", "line 1: 'abc' is not a number"),
    ("0 0.5 nan 0.2 0.2\n", "line 1: non-finite value"),
    ("0.5 0.5 0.5 0.2 0.2\n", "line 1: class id '0.5' is not a whole number"),
])
def test_malformed_row_skips_the_file_naming_the_line(tmp_path: Path, text: str, reason: str) -> None:
    problem, kept = _only_problem(tmp_path, {"a": GOOD_ROW, "bad": text})
    assert problem.path == tmp_path / "labels" / "train" / "bad.txt"
    assert problem.skipped and problem.reason.startswith(reason)
    assert kept == ["a"]


def test_class_id_out_of_range_names_the_valid_range_and_nc_source(tmp_path: Path) -> None:
    problem, _ = _only_problem(tmp_path, {"a": GOOD_ROW, "bad": GOOD_ROW + "2 0.5 0.5 0.1 0.1\n"})
    assert problem.reason == (f"line 2: class id 2 is out of range; valid ids are 0..1 "
                              f"(nc=2 from {tmp_path / 'data.yaml'})")
    negative, _ = _only_problem(tmp_path / "neg", {"bad": "-1 0.5 0.5 0.1 0.1\n", "a": GOOD_ROW})
    assert "class id -1 is out of range" in negative.reason


def test_coordinates_outside_unit_range_skip_the_file(tmp_path: Path) -> None:
    problem, kept = _only_problem(tmp_path, {"a": GOOD_ROW, "px": "0 120 80 30 20\n"})
    assert problem.skipped and "coordinates 120 80 30 20 are outside [0, 1]" in problem.reason
    assert "normalized" in problem.reason and kept == ["a"]


def test_coordinates_within_tolerance_are_clipped_silently(tmp_path: Path) -> None:
    index = load_split(_dataset(tmp_path, {"a": "0 0.5 0.5 1.0005 0.3\n1 0.9 0.5 0.2 0.2\n"}), "train", cache=False)
    assert index.problems == []
    (labels,) = index.labels
    np.testing.assert_allclose(labels[0], [0, 0.5, 0.5, 1.0, 0.3], atol=1e-7)
    np.testing.assert_allclose(labels[1], [1, 0.9, 0.5, 0.2, 0.2], atol=1e-7)  # 0.8..1.0: inside


def test_box_reaching_past_the_edge_is_clipped_and_noted(tmp_path: Path) -> None:
    problem, kept = _only_problem(tmp_path, {"a": "0 0.95 0.5 0.3 0.2\n"})
    assert not problem.skipped and "clipped" in problem.reason and "line 1" in problem.reason
    assert kept == ["a"]
    index = load_split(load_data_config(tmp_path / "data.yaml"), "train", cache=False)
    np.testing.assert_allclose(index.labels[0][0], [0, 0.9, 0.5, 0.2, 0.2], atol=1e-6)


def test_zero_size_box_is_dropped_and_noted(tmp_path: Path) -> None:
    cfg = _dataset(tmp_path, {"a": GOOD_ROW + "1 0.3 0.3 0.0 0.1\n"})
    index = load_split(cfg, "train", cache=False)
    (problem,) = index.problems
    assert not problem.skipped and problem.reason == "1 zero-size box dropped (first: line 2)"
    assert index.labels[0].tolist() == [[0, 0.5, 0.5, 0.25, 0.25]]


def test_duplicate_rows_are_dropped_and_noted(tmp_path: Path) -> None:
    index = load_split(_dataset(tmp_path, {"a": GOOD_ROW * 3 + "1 0.2 0.2 0.1 0.1\n"}), "train", cache=False)
    (problem,) = index.problems
    assert not problem.skipped and problem.reason == "2 duplicate rows dropped"
    assert [row[0] for row in index.labels[0].tolist()] == [0, 1]


def test_polygon_rows_become_their_bounding_box(tmp_path: Path) -> None:
    index = load_split(_dataset(tmp_path, {"a": "1 0.1 0.2 0.5 0.2 0.3 0.6\n"}), "train", cache=False)
    assert index.problems == []
    np.testing.assert_allclose(index.labels[0], [[1, 0.3, 0.4, 0.4, 0.4]], atol=1e-6)


def test_non_utf8_label_file_is_skipped(tmp_path: Path) -> None:
    cfg = _dataset(tmp_path, {"a": GOOD_ROW, "bin": ""})
    (tmp_path / "labels" / "train" / "bin.txt").write_bytes(b"\xff\xfe\x00garbage")
    (problem,) = load_split(cfg, "train", cache=False).problems
    assert problem.skipped and "not UTF-8" in problem.reason


# --- whole splits --------------------------------------------------------------------------------


def test_empty_split_is_an_error_naming_the_split_and_folder(tmp_path: Path) -> None:
    cfg = _dataset(tmp_path, {})
    with pytest.raises(EmptySplitError) as err:
        load_split(cfg, "train")
    message = str(err.value)
    assert message.startswith("train: no images found in ")
    assert str(tmp_path / "images" / "train") in message and str(tmp_path / "data.yaml") in message


def test_split_where_every_image_is_bad_is_an_error_before_training(tmp_path: Path) -> None:
    cfg = _dataset(tmp_path, {"a": "9 0.5 0.5 0.1 0.1\n", "b": "x\n"})
    with pytest.raises(EmptySplitError, match=r"train: none of the split's images is usable: all 2 were skipped"):
        load_split(cfg, "train")


def test_one_warning_per_bad_file_then_one_summary_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    labels = {"ok1": GOOD_ROW, "ok2": GOOD_ROW + "1 0.2 0.2 0.1 0.1\n", "bg": None,
              "badcls": "5 0.5 0.5 0.1 0.1\n", "dup": GOOD_ROW * 2}
    cfg = _dataset(tmp_path, labels, images={"cut.jpg": _jpeg_bytes(9)[:-300]})
    with caplog.at_level(logging.INFO):
        index = load_split(cfg, "train")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3
    assert any(str(tmp_path / "images/train/cut.jpg") in w and "skipped" in w for w in warnings)
    assert any(str(tmp_path / "labels/train/badcls.txt") in w and "out of range" in w for w in warnings)
    assert any(str(tmp_path / "labels/train/dup.txt") in w and w.startswith("train: used ") for w in warnings)
    summary = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert summary[-1] == ("train: 4 images, 4 boxes, 2 skipped (see above), 1 backgrounds, "
                           "1 files fixed (see above)")
    assert _all_decode(index.images)


def test_every_indexed_image_decodes_despite_a_mix_of_bad_files(tmp_path: Path) -> None:
    good = _jpeg_bytes(5)
    cfg = _dataset(tmp_path, {"a": GOOD_ROW, "b": None},
                   images={"t1.jpg": good[:-150], "t2.jpg": good[: len(good) // 2], "z.bmp": b"BM" + b"\0" * 30,
                           "fine.png": _png_bytes()})
    index = load_split(cfg, "train", cache=False)
    assert sorted(p.name for p in index.images) == ["a.jpg", "b.jpg", "fine.png"]
    assert {p.path.name for p in index.problems} == {"t1.jpg", "t2.jpg", "z.bmp"}
    assert _all_decode(index.images)
    assert all(lab.dtype == np.float32 and lab.shape[1:] == (5,) for lab in index.labels)


def _png_bytes() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (32, 32), (10, 200, 30)).save(buf, "PNG")
    return buf.getvalue()


def test_data_yaml_split_of_the_wrong_type_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "data.yaml").write_text("train: 3\nval: images/val\nnames: [a]\n")
    with pytest.raises(DataConfigError, match=r"'train' must be a path or a list of paths .*, got 3"):
        load_data_config(tmp_path / "data.yaml")
