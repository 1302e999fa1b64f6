"""Depth validation: the pictures-and-depth-maps reader and its errors, the bundled ``shapes-depth``,
the scale-and-shift aligned AbsRel / delta1 (an oracle scores perfectly whatever affine map it is
off by; worked cases), and ``val`` / ``libreyolo val`` on Depth Anything V2 (random weights)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from libreyolo_models import LibreYOLO
from libreyolo_models.data.errors import DataConfigError, EmptySplitError
from libreyolo_models.tasks import get_task
from libreyolo_models.tasks.depth.dataset import load_depth_data, read_depth_split
from libreyolo_models.tasks.depth.metrics import score_depth, total
from libreyolo_models.tasks.depth.shapes_depth import generate_shapes_depth


@pytest.fixture(scope="module")
def depth_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("shapes-depth")
    generate_shapes_depth(root, split_sizes={"train": 1, "val": 4})
    return root / "data.yaml"


def test_the_bundled_set_reads_back_as_metres_with_holes_unmeasured(depth_set: Path) -> None:
    split = get_task("depth").load_split(str(depth_set), "val")
    assert len(split) == 4 and split.depth_scale == 1000 and split.max_depth == 10
    first = split.read_depth(0)  # index 0 has a hole of zeros
    assert first.shape == (128, 160) and np.isnan(first).sum() == 144
    measured = first[np.isfinite(first)]
    assert 0.99 <= measured.min() and measured.max() <= 9.0
    assert np.nanmax(first[-1]) < 1.1  # the floor's bottom row is about 1 m away


def test_the_reader_pairs_by_name_and_says_what_it_skips(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "val" / "images").mkdir(parents=True)
    (tmp_path / "val" / "depth").mkdir()
    for name in ("a", "b", "c"):
        Image.new("RGB", (8, 6)).save(tmp_path / "val" / "images" / f"{name}.png")
    np.save(tmp_path / "val" / "depth" / "a.npy", np.full((6, 8), 2.5, np.float32))
    Image.fromarray(np.zeros((5, 8), np.uint16)).save(tmp_path / "val" / "depth" / "b.png")
    data = load_depth_data({"path": str(tmp_path), "val": "val", "depth_scale": 256, "max_depth": 80})
    with caplog.at_level(logging.WARNING):
        split = read_depth_split(data, "val")
    assert [p.name for p in split.images] == ["a.png"] and split.read_depth(0).max() == 2.5
    assert "8x6 picture, but its depth map b.png is 8x5" in caplog.text and "no depth map named c" in caplog.text
    for raw, message in [({"val": "val", "depth_scale": 0}, "depth_scale=0 must be a positive number"),
                         ({"val": "val", "min_depth": 5, "max_depth": 2}, "min_depth=5.0 must be below"),
                         ({"val": ["x"]}, "must be a folder holding images/ and depth/"),
                         ({"path": "."}, "no split")]:
        with pytest.raises(DataConfigError, match=message):
            load_depth_data(raw)
    with pytest.raises(EmptySplitError, match="the images folder .* does not exist"):
        read_depth_split(load_depth_data({"path": str(tmp_path), "train": "nothing"}), "train")


def test_scores_are_scale_and_shift_invariant_and_worked_by_hand() -> None:
    rng = np.random.default_rng(0)
    depth = rng.uniform(1.0, 8.0, (20, 30)).astype(np.float32)
    depth[:2] = np.nan
    oracle = 3.0 / depth + 0.7  # any affine map of the true disparity
    abs_rel, delta1 = score_depth(np.nan_to_num(oracle), depth, max_depth=10.0)
    assert abs_rel == pytest.approx(0.0, abs=1e-6) and delta1 == 1.0
    flat = np.ones_like(depth)  # says nothing: the fit is the mean disparity everywhere
    abs_rel, delta1 = score_depth(flat, depth, max_depth=10.0)
    mean_disparity = np.mean(1.0 / depth[2:].astype(np.float64))
    assert abs_rel == pytest.approx(np.mean(np.abs(1 / mean_disparity - depth[2:]) / depth[2:]), rel=1e-6)
    assert score_depth(flat, np.full_like(depth, np.nan), 10.0) is None
    result = total(np.array([0.3, 1.5, 2.0]), n_images=3)
    assert (result.abs_rel, result.delta1, result.n_scored, result.fitness) == (0.15, 0.75, 2, 0.75)
    assert set(result.as_dict()) == {"metrics/AbsRel", "metrics/delta1"} and "aligned" in result.summary()


def test_val_runs_on_random_weights_and_the_command_line(depth_set: Path, tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    from libreyolo_cli.main import main

    with caplog.at_level(logging.WARNING):
        metrics = LibreYOLO("LibreDepthAnythingV2s.yaml", imgsz=56).val(
            data=str(depth_set), batch=2, verbose=False, plots=True, save_json=True, project=str(tmp_path / "runs"))
    assert "plots=True and save_json=True: the depth task writes nothing for them yet" in caplog.text
    assert not (tmp_path / "runs").exists()  # no empty run folder
    assert metrics.n_images == metrics.n_scored == 4 and 0.0 <= metrics.delta1 <= 1.0 and metrics.abs_rel > 0
    assert main(["val", "model=LibreDepthAnythingV2s.yaml", f"data={depth_set}", "imgsz=56", "batch=4"]) == 0
