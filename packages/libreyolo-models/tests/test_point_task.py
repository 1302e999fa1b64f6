"""The point task: label rows (points and box centres) with broken files, points through the
augmentation, centroid metrics against hand-worked cases and scipy, the bundled shapes-point set,
and ``Results.points``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from libreyolo_models.data.data_config import load_data_config
from libreyolo_models.data.letterbox_images import LetterboxInfo
from libreyolo_models.tasks.point.metrics import CONF_SWEEP, PointMetrics, f1_score, match_points
from libreyolo_models.tasks.point.pipeline import augment_sample
from libreyolo_models.tasks.point.points import Points
from libreyolo_models.tasks.point.points_geometry import points_to_original
from libreyolo_models.tasks.point.reader import parse_point_text, read_point_split
from libreyolo_models.tasks.point.shapes_point import box_row_to_point, generate_shapes_point
from libreyolo_models.tasks.results import Results


def test_label_rows_are_points_or_box_centres() -> None:
    parsed = parse_point_text("0 0.5 0.25\n\n1 0.2 0.4 0.1 0.2\n0 0.5 0.25\n", 2, "d.yaml")
    assert parsed.error is None
    np.testing.assert_allclose(parsed.rows, [[0, 0.5, 0.25], [1, 0.2, 0.4]])
    assert parsed.notes == ("1 duplicate point dropped",)
    assert parse_point_text("0 1.0004 0.5\n", 1, "d").rows[0, 1] == 1.0  # float noise at the edge is clipped
    assert len(parse_point_text("", 3, "d").rows) == 0


@pytest.mark.parametrize(("text", "message"), [
    ("0 0.5\n", "2 values"), ("0 0.1 0.2 0.3\n", "expected 3"), ("a 0.5 0.5\n", "not a number"),
    ("0.5 0.5 0.5\n", "whole number"), ("3 0.5 0.5\n", "class id 3 is out of range; valid ids are 0..2"),
    ("0 1.5 0.5\n", "outside \\[0, 1\\]"), ("0 nan 0.5\n", "finite"),
])
def test_a_broken_row_skips_its_file_with_the_reason(text: str, message: str) -> None:
    parsed = parse_point_text(text, 3, "d.yaml")
    assert parsed.error is not None and len(parsed.rows) == 0
    assert re.search(message, parsed.error), parsed.error


def test_reader_checks_images_and_labels_and_reports_problems(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    for name in ("a", "b", "c", "d"):
        Image.fromarray(np.zeros((20, 30, 3), np.uint8)).save(tmp_path / f"{name}.png")
    (tmp_path / "a.txt").write_text("0 0.5 0.5\n1 0.1 0.2 0.05 0.05\n")
    (tmp_path / "b.txt").write_text("7 0.5 0.5\n")          # class out of range: skipped
    (tmp_path / "d.png").write_bytes(b"broken")             # undecodable: skipped; c has no labels: background
    config = load_data_config({"path": str(tmp_path), "train": str(tmp_path), "names": ["x", "y"]})
    split = read_point_split(config, "train")
    assert [p.name for p in split.images] == ["a.png", "c.png"] and split.n_points() == 2
    assert split.sizes == [(20, 30), (20, 30)] and split.nc == 2
    assert "class id 7" in caplog.text and "d.png" in caplog.text


def test_points_follow_the_pixels_through_letterbox_warp_and_flip() -> None:
    """A bright dot drawn at each labelled point lands where the transformed point says."""
    from libreyolo_models.data.augment_draws import AugmentConfig, draw_sample

    image = np.zeros((60, 100, 3), np.uint8)
    points = np.array([[0, 0.25, 0.5], [1, 0.8, 0.2]], np.float32)
    for _, x, y in points:
        cx, cy = int(x * 100), int(y * 60)
        image[cy - 1:cy + 2, cx - 1:cx + 2] = 255
    config = AugmentConfig(mosaic=0.0, degrees=10.0, translate=0.1, scale=0.2, shear=0.0, hsv_h=0.0, hsv_s=0.0,
                           hsv_v=0.0, fliplr=0.5)
    for index in range(4):
        draws = draw_sample(config, index=index, n_images=4, imgsz=64, seed=1, rank=0, epoch=0, mosaic=False)
        pixels, kept = augment_sample(image, points, imgsz=64, matrix=draws.matrix, hsv=draws.hsv, flip=draws.flip)
        bright = pixels.float().mean(0)
        for cls, x, y in kept:
            px, py = int(x * 64), int(y * 64)
            window = bright[max(0, py - 2):py + 3, max(0, px - 2):px + 3]
            assert window.max() > 60, (index, cls, x, y)  # the dot is there (blurred by the resize)
        assert kept[:, 0].tolist() == sorted(set(kept[:, 0].tolist()))  # classes carried, none invented


def test_points_map_back_through_the_letterbox() -> None:
    info = LetterboxInfo(ratio=0.5, pad=(0.0, 8.0), orig_shape=(48, 64))
    rows = torch.tensor([[16.0, 20.0, 1.0, 0.75], [40.0, 100.0, 0.0, 0.5]])
    back = points_to_original(rows, info)
    assert back.tolist() == [[32.0, 24.0, 1.0, 0.75], [64.0, 48.0, 0.0, 0.5]]  # the second clipped to the picture


def test_hungarian_matching_maximises_pairs_within_reach_then_minimises_distance() -> None:
    predicted = np.array([[0.10, 0.10], [0.14, 0.10]])
    labelled = np.array([[0.12, 0.10], [0.17, 0.10]])
    pairs, dists = match_points(predicted, labelled, 0.05)
    # greedy nearest-first would pair (0, 0) and (1, 0) and leave label 1; the assignment finds two pairs
    assert sorted(pairs.tolist()) == [[0, 0], [1, 1]] and dists.sum() == pytest.approx(0.05)
    assert len(match_points(predicted, np.array([[0.9, 0.9]]), 0.05)[0]) == 0
    assert len(match_points(np.zeros((0, 2)), labelled, 0.05)[0]) == 0


def test_precision_recall_f1_on_a_hand_made_split() -> None:
    metrics = PointMetrics(2, {0: "a", 1: "b"})
    # image 1: class 0 found, class 1 found far away (a false positive and a miss), one duplicate
    metrics.update(np.array([[0.5, 0.5, 0, 0.9], [0.9, 0.9, 1, 0.8], [0.51, 0.5, 0, 0.3]]),
                   np.array([[0, 0.5, 0.52], [1, 0.1, 0.1]]))
    metrics.update(np.zeros((0, 4)), np.zeros((0, 3)))  # an empty image counts for the count error only
    result = metrics.result()
    assert result.conf == pytest.approx(0.35)  # 0.35..0.80 keep the two confident points (best F1: the first)
    assert result.per_class == {0: (1, 1, 0, 0), 1: (1, 0, 1, 1)}
    assert (result.precision, result.recall, result.f1) == pytest.approx((0.5, 0.5, 0.5))
    assert result.mle == pytest.approx(0.02) and result.count_mae == pytest.approx(0.0)
    assert result.fitness == result.f1 and "b" in result.table()
    assert f1_score(0, 0, 0) == (0.0, 0.0, 0.0) and f1_score(2, 2, 0) == pytest.approx((0.5, 1.0, 2 / 3))


def test_metrics_equal_a_brute_force_count_on_random_cases() -> None:
    """Counts per class at one threshold against an exhaustive search for the largest matching."""
    from itertools import permutations

    rng = np.random.default_rng(0)
    for _ in range(20):
        pred = np.concatenate([rng.random((4, 2)) * 0.2, np.zeros((4, 1)), np.ones((4, 1))], axis=1)
        truth = np.concatenate([np.zeros((3, 1)), rng.random((3, 2)) * 0.2], axis=1)
        metrics = PointMetrics(1)
        metrics.update(pred, truth)
        d = np.linalg.norm(pred[:, None, :2] - truth[None, :, 1:], axis=-1)
        best = max(sum(d[p, t] <= 0.05 for p, t in zip(perm, range(3))) for perm in permutations(range(4), 3))
        assert metrics.counts[0, 0, 0] == best
    assert len(CONF_SWEEP) == 19


def test_shapes_point_labels_are_the_shapes_box_centres(tmp_path: Path) -> None:
    assert box_row_to_point("3 0.5 0.25 0.1 0.2") == "3 0.5 0.25"
    generate_shapes_point(tmp_path, split_sizes={"train": 4, "val": 1})
    split = read_point_split(load_data_config(tmp_path / "data.yaml"), "train")
    assert len(split) == 4 and split.nc == 5 and split.n_points() >= 4
    assert all(len(line.split()) == 3 for f in (tmp_path / "labels" / "train").glob("*.txt")
               for line in f.read_text().splitlines())


def test_points_content_through_results(tmp_path: Path) -> None:
    picture = np.zeros((40, 60, 3), np.uint8)
    data = torch.tensor([[30.0, 20.0, 1.0, 0.9], [10.0, 5.0, 0.0, 0.4]])
    result = Results(picture, "x.png", {0: "a", 1: "b"}, contents={"points": Points(data, (40, 60))})
    assert len(result) == 2 and result.boxes is None and result.image is None
    assert result.summary() == "1 b, 1 a" and result.points.xyn.tolist()[0] == pytest.approx([0.5, 0.5])
    rows = json.loads(result.to_json())
    assert rows[0] == {"name": "b", "class": 1, "confidence": 0.9, "x": 30.0, "y": 20.0}
    assert result.to_csv().splitlines()[0] == "name,class,confidence,x,y"
    drawn = result.plot()
    assert drawn.shape == picture.shape and drawn[20, 30].any() and not drawn[35, 55].any()
    assert result.save(tmp_path / "p.png").is_file()
    assert isinstance(result.numpy().points.data, np.ndarray) and result.cpu().points.data.device.type == "cpu"
    empty = Points(torch.zeros((0, 4)), (40, 60))
    assert empty.summary({}) == "no points" and len(empty) == 0


def test_training_batch_pictures_show_the_points(tmp_path: Path) -> None:
    from libreyolo_models.tasks.plots import plot_batch

    images = torch.full((2, 3, 64, 64), 0.5)
    targets = torch.tensor([[0, 1, 0.25, 0.5], [1, 0, 0.75, 0.75]])
    grid = np.asarray(Image.open(plot_batch(images, targets, {0: "a", 1: "b"}, tmp_path / "batch.jpg")))
    def off_grey(y: int, x: int) -> int:
        return int(np.abs(grid[y, x].astype(int) - 128).max())

    assert off_grey(32, 16) > 60 and off_grey(48, 64 + 48) > 60  # a dot on each image at its point
    assert off_grey(10, 64 + 10) < 20                            # grey elsewhere


def test_fraction_keeps_each_image_with_its_own_points(tmp_path: Path) -> None:
    from libreyolo_models.tasks import get_task
    from libreyolo_models.train.fit_options import OptionedTask

    generate_shapes_point(tmp_path, split_sizes={"train": 8, "val": 1})
    task = OptionedTask(get_task("point"), fraction=0.5, seed=0)
    data = task.load_data(str(tmp_path / "data.yaml"))
    full, half = get_task("point").load_split(data, "train"), task.load_split(data, "train")
    assert len(half) == len(half.points) == len(half.sizes) == 4
    for image, points, size in zip(half.images, half.points, half.sizes, strict=True):
        i = full.images.index(image)
        assert np.array_equal(points, full.points[i]) and size == full.sizes[i]
