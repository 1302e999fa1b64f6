"""The smaller cases of issue 38 (reliability round 3), one test each, named after the case: what a
careless or unlucky user did, and the one clear line (or the right result) they now get."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from libreyolo_models import ConfigError, LibreYOLO, SourceError
from libreyolo_models.data.errors import DataConfigError, EmptySplitError

TINY = {"imgsz": 64, "batch": 2, "workers": 0, "epochs": 1, "plots": False, "verbose": False, "val": False}


@pytest.fixture(scope="module")
def model() -> LibreYOLO:
    return LibreYOLO("LibreYOLO9t.yaml")


def _dataset(root: Path, labels: dict[str, str | None], suffix: str = ".jpg") -> Path:
    """``root/data.yaml`` over one image per entry of ``labels`` (None: no label file)."""
    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir()
    rng = np.random.default_rng(0)
    for stem, text in labels.items():
        Image.fromarray(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)).save(root / "images" / f"{stem}{suffix}")
        if text is not None:
            (root / "labels" / f"{stem}.txt").write_text(text)
    (root / "data.yaml").write_text("train: images\nval: images\nnames: [a, b]\n")
    return root / "data.yaml"


def test_predict_imgsz_100000_is_one_line_naming_the_memory(model: LibreYOLO) -> None:
    with pytest.raises(ConfigError, match=r"imgsz=100000 is larger than 16384 px: one image alone would take 112 GiB"):
        model(np.zeros((32, 32, 3), np.uint8), imgsz=100000)


def test_labels_with_six_columns_name_the_confidence_column_and_end_as_bad_data(tmp_path: Path) -> None:
    from libreyolo_models.tasks.detect.datasets import load_split

    data = _dataset(tmp_path, {f"im{i}": "0 0.5 0.5 0.2 0.2 0.93\n" for i in range(4)} | {"bg": None})
    with pytest.raises(EmptySplitError, match=r"train: every labelled image was left out: 4 label files were "
                                              r"rejected \(first: .*im0.txt: line 1: 6 values .* a sixth column "
                                              r"looks like a confidence \(predict's save_conf=True writes one\)"):
        load_split(data, "train", cache=False)


def test_a_split_left_smaller_than_a_batch_by_bad_files_names_them_not_the_batch(tmp_path: Path) -> None:
    good = "0 0.5 0.5 0.2 0.2\n"
    data = _dataset(tmp_path / "ds", {"a": good, "b": "0 0.5 0.5 0.2 0.2 0.9\n", "c": "7 0.5 0.5 0.2 0.2\n"})
    with pytest.raises(DataConfigError, match=r"the train split has 1 usable images, fewer than one batch of 2 .*: "
                                              r"2 of its files were skipped .*first: .*b.txt: line 1: 6 values") as err:
        LibreYOLO("LibreYOLO9t.yaml").train(data=str(data), project=str(tmp_path / "runs"), **TINY)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("suffix", [".gif", ".avif"])
def test_labelled_gif_and_avif_images_are_in_the_training_split(tmp_path: Path, suffix: str) -> None:
    from PIL import features

    from libreyolo_models.tasks.detect.datasets import load_split

    if suffix == ".avif" and not features.check("avif"):
        pytest.skip("this Pillow has no AVIF codec")
    data = _dataset(tmp_path, {"a": "0 0.5 0.5 0.2 0.2\n", "b": "1 0.4 0.4 0.2 0.2\n"}, suffix=suffix)
    index = load_split(data, "train", cache=False)
    assert sorted(p.name for p in index.images) == [f"a{suffix}", f"b{suffix}"] and index.n_instances() == 2


def test_a_glob_through_a_symlink_loop_yields_each_file_once(tmp_path: Path, model: LibreYOLO) -> None:
    (tmp_path / "dir" / "sub").mkdir(parents=True)
    for name in ("dir/a.jpg", "dir/sub/b.jpg"):
        Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(tmp_path / name)
    (tmp_path / "dir" / "sub" / "loop").symlink_to(tmp_path / "dir")
    results = model(str(tmp_path / "dir" / "**" / "*.jpg"), imgsz=32)
    assert sorted(Path(r.path).relative_to(tmp_path).as_posix() for r in results) == ["dir/a.jpg", "dir/sub/b.jpg"]


@pytest.mark.parametrize(("tensor", "match"), [
    (torch.zeros(3, 8, 8).to_sparse(), r"tensor is sparse \(torch.sparse_coo\); pass a dense one: t.to_dense\(\)"),
    (torch.zeros(3, 8, 8, device="meta"), "tensor is on the 'meta' device"),
])
def test_sparse_and_meta_tensors_are_source_errors(model: LibreYOLO, tensor: torch.Tensor, match: str) -> None:
    with pytest.raises(SourceError, match=match):
        model(tensor)


def test_a_5000_character_path_is_one_short_line(model: LibreYOLO) -> None:
    long = "x" * 5000
    for call, kind in ((lambda: model(long + ".jpg"), SourceError),
                       (lambda: LibreYOLO(long + ".pt"), ConfigError),
                       (lambda: model.val(data=long + ".yaml"), DataConfigError)):
        with pytest.raises(kind, match=r"\(5004 characters\)' cannot be read: |\(5005 characters\)' cannot be read: "
                                       r"|\(5003 characters\)' cannot be read: ") as err:
            call()
        assert len(str(err.value)) < 300


def test_a_missing_shm_dir_is_named_not_reported_as_too_large(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    from libreyolo_models.data.cache_store import choose_dir, parse_cache_setting

    monkeypatch.setenv("LIBREYOLO_SHM_DIR", str(tmp_path / "nowhere"))
    with caplog.at_level(logging.INFO):
        chosen = choose_dir(parse_cache_setting("ram", tmp_path / "disk"), 1000)
    assert chosen.parent == tmp_path or "nowhere" not in str(chosen)
    assert f"LIBREYOLO_SHM_DIR={tmp_path / 'nowhere'} is not a folder" in caplog.text
    assert "does not fit in RAM" not in caplog.text


def test_the_mask_size_message_gives_width_by_height(tmp_path: Path) -> None:
    from libreyolo_models.tasks.semantic.reader import check_pair

    Image.fromarray(np.zeros((10, 20, 3), np.uint8)).save(tmp_path / "image.png")  # 20 wide, 10 high
    Image.fromarray(np.zeros((12, 30), np.uint8)).save(tmp_path / "mask.png")      # 30 wide, 12 high
    error = check_pair(tmp_path / "image.png", tmp_path / "mask.png", 3, "data.yaml").error
    assert error is not None and "is 30x12 (w x h) but its image is 20x10" in error


def test_the_tensorboard_warning_names_the_tensorboard_package(monkeypatch: pytest.MonkeyPatch,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    import importlib

    from libreyolo_models.train.loggers.tensorboard import TensorBoardLogger
    from libreyolo_models.train.settings import TrainConfig

    real = importlib.import_module

    def without_tensorboard(name: str, *args: object) -> object:
        if name == "torch.utils.tensorboard":
            raise ImportError("TensorBoard logging requires TensorBoard version 1.15 or above")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", without_tensorboard)
    with caplog.at_level(logging.WARNING):
        assert TensorBoardLogger(TrainConfig(data="shapes", tensorboard=True))._import() is None
    assert "tensorboard=True but tensorboard is not installed" in caplog.text and "but torch" not in caplog.text


def test_classification_val_plots_write_the_confusion_matrices(mini_shapes_cls: Path, tmp_path: Path) -> None:
    classifier = LibreYOLO(family="resnet", size="18", nc=5)
    classifier.val(data=str(mini_shapes_cls), imgsz=32, batch=8, workers=0, verbose=False, plots=True,
                   project=str(tmp_path), name="v")
    for name in ("confusion_matrix.png", "confusion_matrix_normalized.png"):
        with Image.open(tmp_path / "v" / name) as im:
            assert np.asarray(im.convert("L")).std() > 0, name


def test_the_small_dataset_line_states_the_optimizer_steps_it_runs(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    data = _dataset(tmp_path / "ds", {f"im{i}": "0 0.5 0.5 0.2 0.2\n" for i in range(4)})
    with caplog.at_level(logging.INFO, logger="libreyolo_models.train.trainer"):
        LibreYOLO("LibreYOLO9t.yaml").train(data=str(data), project=str(tmp_path / "runs"), **TINY)
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("small dataset"))
    assert line.startswith("small dataset: 2 batches an epoch, so gradients accumulate over 1 instead of nbs/batch = "
                           "32: 2 optimizer steps an epoch instead of 1")
    assert os.path.isdir(tmp_path / "runs")
