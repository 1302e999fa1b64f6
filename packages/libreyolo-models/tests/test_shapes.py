"""The bundled ``shapes`` dataset: deterministic bytes, the promised content, atomic generation."""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from libreyolo_models.data import shapes
from libreyolo_models.data.data_config import load_data_config
from libreyolo_models.data.shapes import CLASS_NAMES, SHAPES_DIRNAME, ensure_shapes
from libreyolo_models.tasks.detect.datasets import load_split, resolve_dataset


@pytest.fixture(scope="module")
def cache_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache dir holding one generated copy (``datasets/shapes-v1``), shared by the module."""
    root = tmp_path_factory.mktemp("cache")
    ensure_shapes(root / "datasets")
    return root


@pytest.fixture(scope="module")
def dataset(cache_root: Path) -> Path:
    return cache_root / "datasets" / SHAPES_DIRNAME


def _digests(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.suffix in (".jpg", ".txt")}  # not label caches


def _rows(dataset: Path, split: str) -> dict[str, np.ndarray]:
    return {p.stem: np.array([line.split() for line in p.read_text().splitlines()], dtype=float).reshape(-1, 5)
            for p in sorted((dataset / "labels" / split).glob("*.txt"))}


def test_two_generations_are_byte_identical(dataset: Path, tmp_path: Path) -> None:
    again = ensure_shapes(tmp_path).parent
    first, second = _digests(dataset), _digests(again)
    assert len(first) == 1000 and first == second
    text = (dataset / "data.yaml").read_text()
    assert text.replace(str(dataset), "ROOT") == (again / "data.yaml").read_text().replace(str(again), "ROOT")


def test_split_sizes_classes_and_backgrounds(dataset: Path) -> None:
    for split, count, backgrounds in (("train", 400, 12), ("val", 100, 3)):
        rows = _rows(dataset, split)
        assert len(rows) == count == len(list((dataset / "images" / split).glob("*.jpg")))
        per_image = Counter(len(r) for r in rows.values())
        assert per_image[0] == backgrounds  # ~3 % background-only images
        assert set(per_image) - {0} <= set(range(1, 7)) and max(per_image) == 6
        classes = Counter(int(c) for r in rows.values() for c in r[:, 0])
        assert set(classes) == set(range(len(CLASS_NAMES)))
        assert min(classes.values()) > 0.12 * sum(classes.values())  # roughly balanced, none rare


def test_boxes_are_normalized_inside_the_image_and_sized_as_promised(dataset: Path) -> None:
    boxes = np.concatenate([r for r in _rows(dataset, "train").values() if len(r)])
    cx, cy, w, h = boxes[:, 1:].T
    assert boxes[:, 1:].min() >= 0 and boxes[:, 1:].max() <= 1
    assert (cx - w / 2).min() >= 0 and (cx + w / 2).max() <= 1 + 1e-6
    assert (cy - h / 2).min() >= 0 and (cy + h / 2).max() <= 1 + 1e-6
    with Image.open(dataset / "images" / "train" / "train_0001.jpg") as im:
        assert im.format == "JPEG"
    extent = np.maximum(w * 256, h * 256) / 256  # longest side, as a fraction (square images)
    assert 0.05 < extent.min() and extent.max() < 0.5


def test_image_sizes_mix_square_and_both_orientations(dataset: Path) -> None:
    sizes = Counter()
    for path in sorted((dataset / "images" / "train").glob("*.jpg")):
        with Image.open(path) as im:
            sizes[im.size] += 1
    assert set(sizes) == {(256, 256), (320, 240), (240, 320)}
    assert sizes[(256, 256)] > 180 and sizes[(320, 240)] > 40 and sizes[(240, 320)] > 40


def test_data_shapes_resolves_through_the_cache_dir_and_loads_cleanly(
        cache_root: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LIBREYOLO_CACHE_DIR", str(cache_root))
    monkeypatch.chdir(tmp_path)  # no local file named shapes
    cfg = load_data_config("shapes")
    assert resolve_dataset("shapes.yaml") == cfg
    assert cfg.names == dict(enumerate(CLASS_NAMES)) and cfg.nc == 5
    assert cfg.root == cache_root / "datasets" / SHAPES_DIRNAME
    train, val = load_split(cfg, "train"), load_split(cfg, "val")
    assert (len(train), len(val)) == (400, 100)
    assert train.problems == [] and val.problems == []
    assert 1000 < train.n_instances() < 1600


def test_concurrent_first_use_yields_one_complete_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shapes, "SPLIT_SIZES", {"train": 6, "val": 3})  # the race, not the volume
    barrier = threading.Barrier(2)
    results: list[Path] = []

    def first_use() -> None:
        barrier.wait()
        results.append(ensure_shapes(tmp_path))

    threads = [threading.Thread(target=first_use) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [tmp_path / SHAPES_DIRNAME / "data.yaml"] * 2
    assert [p.name for p in tmp_path.iterdir()] == [SHAPES_DIRNAME]  # no temp folder left behind
    assert len(list((tmp_path / SHAPES_DIRNAME / "images" / "train").iterdir())) == 6


def test_incomplete_folder_in_the_way_is_reported_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shapes, "SPLIT_SIZES", {"train": 1, "val": 1})
    (tmp_path / SHAPES_DIRNAME / "images").mkdir(parents=True)
    with pytest.raises(OSError, match="holds no data.yaml .*delete"):
        ensure_shapes(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [SHAPES_DIRNAME]
