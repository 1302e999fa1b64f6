"""Pose data: the keypoint layout in data.yaml (kpt_shape, flip_idx, oks_sigmas), YOLO keypoint
labels (x y v and x y, unlabelled keypoints), COCO keypoints JSON, the bundled set."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from libreyolo_models.data.errors import DataConfigError
from libreyolo_models.tasks import get_task
from libreyolo_models.tasks.instances.split import LabelError
from libreyolo_models.tasks.pose.reader import COCO_SIGMAS, keypoint_parser, load_pose_config


def _yaml(tmp_path: Path, extra: str) -> Path:
    (tmp_path / "images").mkdir(exist_ok=True)
    path = tmp_path / "data.yaml"
    path.write_text(f"train: images\nnames: [person]\n{extra}")
    return path


def test_keypoint_layout_is_read_and_checked(tmp_path: Path) -> None:
    cfg = load_pose_config(_yaml(tmp_path, "kpt_shape: [3, 3]\nflip_idx: [0, 2, 1]\noks_sigmas: [0.1, 0.2, 0.2]\n"))
    assert (cfg.keypoints, cfg.kpt_shape, cfg.flip_idx, cfg.sigmas) == (3, (3, 3), (0, 2, 1), (0.1, 0.2, 0.2))
    assert "kpt_shape" not in cfg.extra
    coco = load_pose_config(_yaml(tmp_path, "kpt_shape: [17, 3]\n"))
    assert coco.sigmas == COCO_SIGMAS and coco.flip_idx is None
    assert load_pose_config(_yaml(tmp_path, "kpt_shape: [4, 2]\n")).sigmas == (0.25,) * 4
    for extra, words in (("", "kpt_shape"), ("kpt_shape: [3, 4]\n", "kpt_shape"),
                         ("kpt_shape: [3, 3]\nflip_idx: [0, 1, 1]\n", "permutation"),
                         ("kpt_shape: [3, 3]\noks_sigmas: [0.1]\n", "oks_sigmas")):
        with pytest.raises(DataConfigError, match=words):
            load_pose_config(_yaml(tmp_path, extra))


def test_yolo_keypoint_rows_with_and_without_visibility() -> None:
    parse = keypoint_parser((3, 3))
    rows, kps = parse("0 0.5 0.5 0.4 0.4 0.3 0.3 2 0 0 0 0.7 0.6 1\n")
    assert np.allclose(rows, [[0, 0.5, 0.5, 0.4, 0.4]])
    assert np.allclose(kps[0], [[0.3, 0.3, 2], [0, 0, 0], [0.7, 0.6, 1]])  # v=0: not labelled
    rows, kps = keypoint_parser((2, 2))("1 0.5 0.5 0.2 0.2 0.4 0.4 0.6 0.6\n")
    assert kps[0][:, 2].tolist() == [2, 2]  # x y labels: every keypoint visible
    for text, words in (("0 0.5 0.5 0.4 0.4 0.3 0.3 2", "values"), ("0 0.5 0.5 0.4 0.4 0.3 0.3 2 0 0 0 0.7 1.6 2", "outside"),
                        ("0 0.5 0.5 0.4 0.4 0.3 0.3 3 0 0 0 0.7 0.6 2", "visibility"),
                        ("0 0.5 0.5 0 0.4 0.3 0.3 2 0 0 0 0.7 0.6 2", "box")):
        with pytest.raises(LabelError, match=words):
            parse(text)
    rows, kps = parse("0 0.5 0.5 0.4 0.4 0.3 0.3 2 5 5 0 0.7 0.6 1\n")  # v=0 coordinates are ignored
    assert kps[0][1].tolist() == [1, 1, 0]


def _image(path: Path, h: int = 40, w: int = 60) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((h, w, 3), 90, np.uint8)).save(path)


def test_yolo_pose_split_with_an_empty_label_file_and_a_broken_one(tmp_path: Path) -> None:
    for name in ("a", "b", "c"):
        _image(tmp_path / "images" / f"{name}.png")
    (tmp_path / "labels").mkdir()
    (tmp_path / "labels" / "a.txt").write_text("0 0.5 0.5 0.4 0.4 0.3 0.3 2 0.7 0.7 2\n")
    (tmp_path / "labels" / "b.txt").write_text("\n")
    (tmp_path / "labels" / "c.txt").write_text("0 0.5 0.5 0.4 0.4 0.3 0.3 2\n")
    path = tmp_path / "data.yaml"
    path.write_text("train: images\nval: images\nnames: [thing]\nkpt_shape: [2, 3]\nflip_idx: [1, 0]\n")
    task = get_task("pose")
    data = task.load_data(path)
    split = task.load_split(data, "train")
    assert len(split) == 2 and [len(lab) for lab in split.labels] == [1, 0]
    assert split.extras[0][0].shape == (2, 3)
    assert len(split.problems) == 1 and "2 x x y v" in split.problems[0].reason


def test_coco_keypoints_json(tmp_path: Path) -> None:
    _image(tmp_path / "images" / "one.png", 100, 200)
    doc = {"images": [{"id": 3, "file_name": "one.png"}],
           "annotations": [
               {"id": 1, "image_id": 3, "category_id": 1, "bbox": [20, 10, 100, 50], "num_keypoints": 1,
                "keypoints": [40, 20, 2, 0, 0, 0]},
               {"id": 2, "image_id": 3, "category_id": 1, "num_keypoints": 2, "keypoints": [10, 10, 1, 30, 50, 2]},
               {"id": 4, "image_id": 3, "category_id": 1, "bbox": [0, 0, 5, 5], "keypoints": [0, 0, 0, 0, 0, 0],
                "iscrowd": 1}],
           "categories": [{"id": 1, "name": "person", "keypoints": ["head", "tail"]}]}
    (tmp_path / "ann.json").write_text(json.dumps(doc))
    path = tmp_path / "data.yaml"
    path.write_text("train: ann.json\n")
    task = get_task("pose")
    data = task.load_data(path)
    assert data.kpt_shape == (2, 3)  # from the category's keypoint names
    split = task.load_split(data, "train")
    assert split.counts["crowd"] == 1
    assert np.allclose(split.labels[0][:, 1:], [[0.35, 0.35, 0.5, 0.5], [0.1, 0.3, 0.1, 0.4]])
    assert np.allclose(split.extras[0][0], [[0.2, 0.2, 2], [0, 0, 0]])


def test_bundled_shapes_pose_has_houses_with_five_labelled_corners(tmp_path: Path) -> None:
    from libreyolo_models.tasks.pose.shapes_pose import FLIP_IDX, ensure_shapes_pose, render_houses

    path = ensure_shapes_pose(tmp_path, split_sizes={"train": 3, "val": 2})
    task = get_task("pose")
    data = task.load_data(path)
    assert data.kpt_shape == (5, 3) and data.flip_idx == FLIP_IDX and data.names == {0: "house"}
    split = task.load_split(data, "train")
    _, houses = render_houses("train", 1)
    kp = split.extras[1]
    assert len(kp) == len(houses) > 0 and all((k[:, 2] == 2).all() for k in kp)
    h, w = Image.open(split.images[1]).size[::-1]
    assert np.allclose(kp[0][:, :2] * [w, h], houses[0], atol=1e-3)
    apex, right, left = houses[0][0], houses[0][1], houses[0][4]
    assert apex[1] < right[1] and right[0] > left[0]  # roof up, right eave on the right


def test_fraction_keeps_each_image_with_its_own_keypoints(tmp_path: Path) -> None:
    """``fraction=`` cuts the split's per-image lists together (its ``extras`` too) and keeps what
    the pipelines need: every kept image's keypoints still match its boxes."""
    from libreyolo_models.tasks.pose.shapes_pose import ensure_shapes_pose
    from libreyolo_models.train.fit_options import OptionedTask

    data = ensure_shapes_pose(tmp_path, split_sizes={"train": 8, "val": 1})
    task = OptionedTask(get_task("pose"), fraction=0.5, seed=0)
    part = task.load_split(task.load_data(str(data)), "train")
    full = get_task("pose").load_split(str(data), "train")
    assert len(part) == 4 and set(part.images) < set(full.images)
    for image, labels, extras in zip(part.images, part.labels, part.extras):
        i = full.images.index(image)
        assert np.array_equal(labels, full.labels[i]) and len(extras) == len(full.extras[i])
    pipeline = task.val_pipeline(part, imgsz=64, batch_size=4, device="cpu", workers=0, cache=False)
    for sample in next(iter(pipeline)).targets:
        assert sample.keypoints is not None and len(sample.keypoints) == len(sample.boxes)
