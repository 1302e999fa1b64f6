"""data.yaml parsing, split sources (folders, image lists) and the per-split label cache."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from libreyolo_models.data import image_check
from libreyolo_models.data.data_config import load_data_config
from libreyolo_models.data.errors import DataConfigError, EmptySplitError
from libreyolo_models.data.yolo_reader import label_path_for
from libreyolo_models.tasks.detect.datasets import load_split, resolve_dataset


def _image(path: Path, size: tuple[int, int] = (32, 32)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, (90, 140, 200)).save(path)
    return path


def _yaml(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "data.yaml").write_text(text)
    return folder / "data.yaml"


def _tree(root: Path, split: str = "train", n: int = 3) -> None:
    """``n`` images with one box each under images/<split>, labels under labels/<split>."""
    for i in range(n):
        _image(root / "images" / split / f"im{i}.jpg")
        lab = root / "labels" / split / f"im{i}.txt"
        lab.parent.mkdir(parents=True, exist_ok=True)
        lab.write_text(f"{i % 2} 0.5 0.5 0.25 0.25\n")


# --- data.yaml parsing ---------------------------------------------------------------------------


def test_names_list_becomes_id_to_name_mapping(tmp_path: Path) -> None:
    cfg = load_data_config(_yaml(tmp_path, "train: images/train\nval: images/val\nnames: [cat, dog]\n"))
    assert cfg.names == {0: "cat", 1: "dog"}
    assert cfg.nc == 2
    assert cfg.root == tmp_path  # no `path` key: the yaml's folder is the root
    assert cfg.train == tmp_path / "images" / "train"
    assert cfg.test is None


def test_names_dict_accepts_int_and_digit_string_keys(tmp_path: Path) -> None:
    text = "train: a\nval: b\nnc: 3\nnames:\n  0: cat\n  '1': dog\n  2: bird\n"
    assert load_data_config(_yaml(tmp_path, text)).names == {0: "cat", 1: "dog", 2: "bird"}


def test_names_dict_with_a_gap_is_rejected_with_the_missing_id(tmp_path: Path) -> None:
    path = _yaml(tmp_path, "train: a\nval: b\nnames: {0: cat, 2: dog}\n")
    with pytest.raises(DataConfigError, match=r"names.*0\.\.1.*missing \[1\]") as err:
        load_data_config(path)
    assert str(path) in str(err.value)


def test_nc_disagreeing_with_names_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(DataConfigError, match=r"nc=3 but 'names' lists 2 classes"):
        load_data_config(_yaml(tmp_path, "train: a\nval: b\nnc: 3\nnames: [cat, dog]\n"))


def test_nc_without_names_gives_numbered_names(tmp_path: Path) -> None:
    assert load_data_config(_yaml(tmp_path, "train: a\nval: b\nnc: 2\n")).names == {0: "class0", 1: "class1"}


@pytest.mark.parametrize(("text", "key", "example"), [
    ("val: a\nnames: [x]\n", "train", "train: images/train"),
    ("train: a\nval: b\n", "names", "names: {0: cat, 1: dog}"),
])
def test_missing_key_error_names_file_key_and_example(tmp_path: Path, text: str, key: str, example: str) -> None:
    path = _yaml(tmp_path, text)
    with pytest.raises(DataConfigError) as err:
        load_data_config(path)
    message = str(err.value)
    assert str(path) in message and f"missing key {key!r}" in message and example in message
    assert isinstance(err.value, ValueError)


def test_missing_val_is_allowed_until_the_val_split_is_asked_for(tmp_path: Path) -> None:
    path = _yaml(tmp_path, "train: a\nnames: [x]\n")
    cfg = load_data_config(path)
    assert cfg.val is None
    with pytest.raises(DataConfigError, match=r"no 'val' key, so there is no val split; add one, e.g. `val: images/val`"):
        cfg.split_paths("val")


def test_misspelt_key_is_pointed_out_in_the_missing_key_error(tmp_path: Path) -> None:
    with pytest.raises(DataConfigError, match=r"found 'trian': a typo\?"):
        load_data_config(_yaml(tmp_path, "trian: a\nval: b\nnames: [x]\n"))


def test_invalid_yaml_names_the_file(tmp_path: Path) -> None:
    path = _yaml(tmp_path, "train: [a\nval: b\n")
    with pytest.raises(DataConfigError, match="not valid YAML") as err:
        load_data_config(path)
    assert str(path) in str(err.value)


def test_relative_path_key_resolves_against_the_yaml_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sets" / "ds").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    cfg = load_data_config(_yaml(tmp_path / "sets" / "cfg", "path: ../ds\ntrain: images/train\n"
                                 "val: [images/v1, images/v2]\ntest: ''\nnames: [x]\n"))
    assert cfg.root == tmp_path / "sets" / "ds"
    assert cfg.val == (cfg.root / "images" / "v1", cfg.root / "images" / "v2")
    assert cfg.test is None  # blank means absent, as in many Ultralytics yamls
    assert cfg.split_paths("train") == (cfg.root / "images" / "train",)


def test_dotdot_split_entry_falls_back_inside_the_root_like_roboflow_exports(tmp_path: Path) -> None:
    (tmp_path / "train" / "images").mkdir(parents=True)
    cfg = load_data_config(_yaml(tmp_path, "train: ../train/images\nval: ../valid/images\nnames: [x]\n"))
    assert cfg.train == tmp_path / "train" / "images"
    assert cfg.val == tmp_path.parent / "valid" / "images"  # neither exists: the literal reading


def test_folder_and_dict_inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _yaml(tmp_path / "ds", "train: images/train\nval: images/val\nnames: [x]\n")
    assert load_data_config(tmp_path / "ds").root == tmp_path / "ds"
    monkeypatch.chdir(tmp_path)
    cfg = resolve_dataset({"path": "ds", "train": "images/train", "val": "images/val", "names": ["x"]})
    assert cfg.train == tmp_path / "ds" / "images" / "train"
    assert cfg.source == "data dict"
    assert resolve_dataset(cfg) is cfg


def test_unknown_data_name_suggests_the_bundled_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataConfigError, match="did you mean the bundled dataset 'shapes'"):
        load_data_config("shape")


def test_foreign_keys_are_kept_and_a_near_miss_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        cfg = load_data_config(_yaml(tmp_path, "train: a\nval: b\nnames: [x]\ndownload: get.sh\ntset: c\n"))
    assert cfg.extra == {"download": "get.sh", "tset": "c"}
    assert [r.getMessage() for r in caplog.records] == [
        f"{tmp_path / 'data.yaml'}: unknown key 'tset' ignored; did you mean 'test'?"]


def test_asking_for_an_absent_split_says_which_key_to_add(tmp_path: Path) -> None:
    cfg = load_data_config(_yaml(tmp_path, "train: a\nval: b\nnames: [x]\n"))
    with pytest.raises(DataConfigError, match=r"no 'test' key.*test: images/test"):
        load_split(cfg, "test")


# --- split sources -------------------------------------------------------------------------------


def test_label_path_replaces_the_last_images_folder() -> None:
    assert label_path_for(Path("/d/images/x/images/tr/a.b.JPG")) == Path("/d/images/x/labels/tr/a.b.txt")
    assert label_path_for(Path("/d/flat/a.png")) == Path("/d/flat/a.txt")


def test_folder_split_finds_images_of_every_suffix_case_insensitively(tmp_path: Path) -> None:
    for name in ("a.JPG", "b.png", "c.bmp", "d.webp", "e.tif", "sub/f.jpeg"):
        _image(tmp_path / "images" / "train" / name)
    (tmp_path / "images" / "train" / "notes.md").write_text("not an image")
    _image(tmp_path / "elsewhere" / "g.png")
    (tmp_path / "images" / "train" / "linked").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere" / "loop").symlink_to(tmp_path / "images")  # a cycle must not hang the walk
    cfg = load_data_config(_yaml(tmp_path, "train: images/train\nval: images/train\nnames: [x]\n"))
    index = load_split(cfg, "train", cache=False)
    assert [p.relative_to(tmp_path / "images" / "train").as_posix() for p in index.images] == [
        "a.JPG", "b.png", "c.bmp", "d.webp", "e.tif", "linked/g.png", "sub/f.jpeg"]
    assert index.problems == []


def test_image_list_resolves_lines_beside_the_list_then_under_the_root(tmp_path: Path) -> None:
    _tree(tmp_path, "train", n=3)
    lists = tmp_path / "lists"
    lists.mkdir()
    _image(lists / "local.jpg")
    (lists / "train.txt").write_text("# comment\nlocal.jpg\n\nimages/train/im0.jpg\n"
                                     f"{tmp_path / 'images/train/im2.jpg'}\nimages/train/gone.jpg\n")
    cfg = load_data_config(_yaml(tmp_path, "train: lists/train.txt\nval: images/train\nnames: [a, b]\n"))
    index = load_split(cfg, "train")
    assert index.images == [lists / "local.jpg", tmp_path / "images/train/im0.jpg",
                            tmp_path / "images/train/im2.jpg"]
    assert [len(lab) for lab in index.labels] == [0, 1, 1]
    (missing,) = index.problems
    assert missing.skipped and "line 6" in missing.reason and "not found" in missing.reason
    assert (lists / "train.cache.npz").is_file()  # a list's cache sits beside the list


def test_split_may_list_several_sources(tmp_path: Path) -> None:
    _tree(tmp_path, "a", n=2)
    _tree(tmp_path, "b", n=1)
    cfg = load_data_config(_yaml(tmp_path, "train: [images/a, images/b]\nval: images/a\nnames: [a, b]\n"))
    assert len(load_split(cfg, "train")) == 3


def test_oriented_size_follows_the_exif_rotation(tmp_path: Path) -> None:
    path = tmp_path / "images" / "train" / "rot.jpg"
    path.parent.mkdir(parents=True)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees on display
    Image.new("RGB", (40, 20)).save(path, exif=exif)
    cfg = load_data_config(_yaml(tmp_path, "train: images/train\nval: images/train\nnames: [x]\n"))
    assert load_split(cfg, "train", cache=False).sizes == [(40, 20)]


# --- label cache ---------------------------------------------------------------------------------


@pytest.fixture
def counted_checks(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every path passed to ``check_image`` (the image-opening step) while the test runs."""
    calls: list[Path] = []
    real = image_check.check_image

    def counting(path: Path) -> image_check.ImageCheck:
        calls.append(path)
        return real(path)

    monkeypatch.setattr(image_check, "check_image", counting)
    return calls


def test_second_load_reuses_the_cache_without_opening_images(
        tmp_path: Path, counted_checks: list[Path], caplog: pytest.LogCaptureFixture) -> None:
    _tree(tmp_path, "train", n=3)
    cfg = load_data_config(_yaml(tmp_path, "train: images/train\nval: images/train\nnames: [a, b]\n"))
    first = load_split(cfg, "train")
    assert len(counted_checks) == 3
    assert (tmp_path / "labels" / "train" / "train.cache.npz").is_file()
    with caplog.at_level(logging.INFO):
        second = load_split(cfg, "train")
    assert len(counted_checks) == 3  # nothing re-opened
    assert any("read from cache" in r.getMessage() for r in caplog.records)
    assert second.images == first.images and second.sizes == first.sizes
    assert all(np.array_equal(a, b) and b.dtype == np.float32 for a, b in zip(first.labels, second.labels))


def test_changed_label_file_invalidates_the_cache(tmp_path: Path, counted_checks: list[Path]) -> None:
    _tree(tmp_path, "train", n=2)
    cfg = load_data_config(_yaml(tmp_path, "train: images/train\nval: images/train\nnames: [a, b]\n"))
    load_split(cfg, "train")
    label = tmp_path / "labels" / "train" / "im1.txt"
    label.write_text("0 0.5 0.5 0.25 0.25\n1 0.2 0.2 0.1 0.1\n")
    os.utime(label, ns=(1, 1))  # a different mtime even on coarse-clock filesystems
    index = load_split(cfg, "train")
    assert len(counted_checks) == 4
    assert [len(lab) for lab in index.labels] == [1, 2]


def test_cache_problems_survive_the_round_trip(tmp_path: Path) -> None:
    _tree(tmp_path, "train", n=2)
    (tmp_path / "labels" / "train" / "im1.txt").write_text("5 0.5 0.5 0.1 0.1\n")
    cfg = load_data_config(_yaml(tmp_path, "train: images/train\nval: images/train\nnames: [a, b]\n"))
    assert load_split(cfg, "train").problems == load_split(cfg, "train").problems != []


def test_unwritable_label_folder_falls_back_to_the_cache_dir(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counted_checks: list[Path],
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("LIBREYOLO_CACHE_DIR", str(tmp_path / "cache"))
    _tree(tmp_path / "ds", "train", n=2)
    (tmp_path / "ds" / "labels" / "train" / "train.cache.npz").mkdir()  # blocks the write, even as root
    cfg = load_data_config(_yaml(tmp_path / "ds", "train: images/train\nval: images/train\nnames: [a, b]\n"))
    with caplog.at_level(logging.INFO):
        load_split(cfg, "train")
    fallback = list((tmp_path / "cache" / "labels").glob("*-train.cache.npz"))
    assert len(fallback) == 1
    assert [r.getMessage() for r in caplog.records if "cannot write label cache" in r.getMessage()] != []
    load_split(cfg, "train")
    assert len(counted_checks) == 2  # the second load found the fallback cache


def test_cache_false_neither_reads_nor_writes(tmp_path: Path, counted_checks: list[Path]) -> None:
    _tree(tmp_path, "train", n=2)
    cfg = load_data_config(_yaml(tmp_path, "train: images/train\nval: images/train\nnames: [a, b]\n"))
    load_split(cfg, "train", cache=False)
    load_split(cfg, "train", cache=False)
    assert len(counted_checks) == 4
    assert not list(tmp_path.rglob("*.cache.npz"))


def test_damaged_cache_file_is_rescanned(tmp_path: Path, counted_checks: list[Path]) -> None:
    _tree(tmp_path, "train", n=2)
    cfg = load_data_config(_yaml(tmp_path, "train: images/train\nval: images/train\nnames: [a, b]\n"))
    load_split(cfg, "train")
    (tmp_path / "labels" / "train" / "train.cache.npz").write_bytes(b"PK\x03\x04 not really a zip")
    assert len(load_split(cfg, "train")) == 2
    assert len(counted_checks) == 4


def test_missing_split_folder_is_an_empty_split_error_naming_where(tmp_path: Path) -> None:
    cfg = load_data_config(_yaml(tmp_path, "train: images/train\nval: images/val\nnames: [x]\n"))
    with pytest.raises(EmptySplitError, match=rf"val: {tmp_path / 'images' / 'val'} does not exist"):
        load_split(cfg, "val")
