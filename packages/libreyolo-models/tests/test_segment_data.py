"""Instance segmentation data: RLE and polygon masks, the YOLO polygon and COCO readers (polygons,
RLE with holes, crowd regions, broken rows, empty label files), outlines, the bundled set."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from libreyolo_models.tasks import get_task
from libreyolo_models.tasks.instances.split import LabelError
from libreyolo_models.tasks.segment.mask_shapes import (
    PolygonMask,
    RLEMask,
    compress_counts,
    decompress_counts,
    fill_polygon,
    mask_outline,
)
from libreyolo_models.tasks.segment.reader import parse_polygon_labels


def _ring(h: int = 20, w: int = 30) -> np.ndarray:
    """A rectangle with a rectangular hole."""
    m = np.zeros((h, w), bool)
    m[2:18, 3:27] = True
    m[6:14, 10:20] = False
    return m


def test_rle_round_trips_and_compresses_like_pycocotools() -> None:
    mask_utils = pytest.importorskip("pycocotools.mask")
    rng = np.random.default_rng(0)
    for m in (_ring(), rng.random((17, 23)) > 0.5, np.ones((5, 4), bool), np.zeros((3, 3), bool)):
        rle = RLEMask.encode(m)
        assert np.array_equal(rle.decode(), m)
        theirs = mask_utils.encode(np.asfortranarray(m.astype(np.uint8)))
        assert rle.to_coco()["counts"] == theirs["counts"].decode()
        assert decompress_counts(compress_counts(rle.counts)) == list(rle.counts)


def test_rle_resized_by_nearest_pixel_centres_and_its_box() -> None:
    rle = RLEMask.encode(_ring())
    half = rle.rasterize(10, 15)
    assert half.shape == (10, 15) and half[2, 2] and not half[5, 7]  # the hole survives
    assert rle.box() == pytest.approx([3 / 30, 2 / 20, 27 / 30, 18 / 20])


def test_polygon_fill_takes_the_pixels_whose_centre_is_inside() -> None:
    square = fill_polygon(np.array([[2.0, 1.0], [6.0, 1.0], [6.0, 4.0], [2.0, 4.0]]), 6, 8)
    assert square.sum() == 12 and square[1:4, 2:6].all()
    corners = np.array([[0.03, 0.07], [0.91, 0.22], [0.35, 0.96]])
    tri = PolygonMask((corners,)).rasterize(30, 40)
    ys, xs = np.mgrid[:30, :40]
    px, py = (xs + 0.5) / 40, (ys + 0.5) / 30

    def side(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return (b[0] - a[0]) * (py - a[1]) - (b[1] - a[1]) * (px - a[0])

    inside = (side(corners[0], corners[1]) > 0) & (side(corners[1], corners[2]) > 0) & (side(corners[2], corners[0]) > 0)
    assert np.array_equal(tri, inside) and 300 < tri.sum() < 600


def test_outline_traces_the_outer_border_and_fills_back_to_the_mask() -> None:
    m = np.zeros((12, 14), bool)
    m[3:9, 2:7] = True
    m[5:11, 6:12] = True
    poly = mask_outline(m)
    assert np.array_equal(fill_polygon(poly, 12, 14), m)
    assert mask_outline(np.zeros((4, 4), bool)).shape == (0, 2)
    outer = mask_outline(_ring())  # holes are not part of the outer outline
    assert fill_polygon(outer, 20, 30).sum() == 16 * 24


def test_yolo_polygon_rows_and_their_errors() -> None:
    rows, masks = parse_polygon_labels("2 0.1 0.1 0.5 0.1 0.5 0.6\n\n0 0 0 1 0 1 1 0 1\n")
    assert rows.shape == (2, 5) and rows[0].tolist() == pytest.approx([2, 0.3, 0.35, 0.4, 0.5])
    assert masks[1].rasterize(4, 4).all()
    for text, words in (("0 0.5 0.5 0.2 0.2", "a box"), ("0 0.1 0.1 0.2", "values"),
                        ("0 0.1 0.1 0.5 0.1 0.5 1.7", "is outside"), ("x 0.1 0.1 0.5 0.1 0.5 0.6", "not a number")):
        with pytest.raises(LabelError, match=words):
            parse_polygon_labels(text)


def _image(path: Path, h: int = 40, w: int = 60) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((h, w, 3), 90, np.uint8)).save(path)


def test_yolo_split_reads_polygons_backgrounds_and_skips_a_broken_file(tmp_path: Path) -> None:
    for name in ("a", "b", "c", "d"):
        _image(tmp_path / "images" / "train" / f"{name}.png")
    labels = tmp_path / "labels" / "train"
    labels.mkdir(parents=True)
    (labels / "a.txt").write_text("1 0.1 0.1 0.9 0.1 0.9 0.9 0.1 0.9\n")
    (labels / "b.txt").write_text("")                                   # empty: a background
    (labels / "c.txt").write_text("0 0.5 0.5 0.3 0.3\n")                 # a box: not usable for segment
    (tmp_path / "data.yaml").write_text("train: images/train\nval: images/train\nnames: [a, b]\n")
    task = get_task("segment")
    split = task.load_split(task.load_data(tmp_path / "data.yaml"), "train")
    assert [p.name for p in split.images] == ["a.png", "b.png", "d.png"]   # d: no label file
    assert [len(lab) for lab in split.labels] == [1, 0, 0]
    assert split.extras[0][0].rasterize(40, 60).sum() == 32 * 48
    assert len(split.problems) == 1 and "c.png" in str(split.problems[0].path)
    assert "box" in split.problems[0].reason


def test_coco_split_reads_polygons_and_rle_with_holes_and_skips_crowds(tmp_path: Path) -> None:
    _image(tmp_path / "images" / "one.png", 20, 30)
    _image(tmp_path / "images" / "two.png", 20, 30)
    ring = _ring()
    uncompressed = {"size": [20, 30], "counts": list(RLEMask.encode(ring).counts)}
    doc = {
        "images": [{"id": 1, "file_name": "one.png"}, {"id": 2, "file_name": "two.png"}],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 7, "segmentation": RLEMask.encode(ring).to_coco(), "iscrowd": 0},
            {"id": 2, "image_id": 1, "category_id": 9, "segmentation": [[0, 0, 10, 0, 10, 10, 0, 10]], "iscrowd": 0},
            {"id": 3, "image_id": 2, "category_id": 7, "segmentation": uncompressed, "iscrowd": 0},
            {"id": 4, "image_id": 2, "category_id": 9, "segmentation": uncompressed, "iscrowd": 1},
        ],
        "categories": [{"id": 7, "name": "ring"}, {"id": 9, "name": "block"}],
    }
    (tmp_path / "ann.json").write_text(json.dumps(doc))
    (tmp_path / "data.yaml").write_text("train: ann.json\n")
    task = get_task("segment")
    split = task.load_split(task.load_data(tmp_path / "data.yaml"), "train")
    assert split.names == {0: "ring", 1: "block"} and split.counts.get("crowd") == 1
    assert [lab[:, 0].tolist() for lab in split.labels] == [[0, 1], [0]]
    for extras in split.extras[0][:1] + split.extras[1]:
        assert np.array_equal(extras.rasterize(20, 30), ring)              # the hole is kept exactly
    assert split.extras[0][1].rasterize(20, 30).sum() == 100
    assert split.labels[0][0, 1:].tolist() == pytest.approx([0.5, 0.5, 0.8, 0.8])


def test_a_bad_rle_skips_its_image_with_the_annotation_named(tmp_path: Path) -> None:
    _image(tmp_path / "images" / "one.png", 20, 30)
    doc = {"images": [{"id": 1, "file_name": "one.png"}],
           "annotations": [{"id": 5, "image_id": 1, "category_id": 1, "segmentation": {"size": [10, 10], "counts": [100]}}],
           "categories": [{"id": 1, "name": "x"}]}
    (tmp_path / "ann.json").write_text(json.dumps(doc))
    (tmp_path / "data.yaml").write_text("train: ann.json\n")
    task = get_task("segment")
    with pytest.raises(Exception, match="no usable image"):
        task.load_split(task.load_data(tmp_path / "data.yaml"), "train")


def test_bundled_shapes_inst_masks_are_the_visible_pixels(tmp_path: Path) -> None:
    from libreyolo_models.tasks.segment.shapes_inst import ensure_shapes_inst, render_instances

    yaml_path = ensure_shapes_inst(tmp_path, split_sizes={"train": 4, "val": 2})
    task = get_task("segment")
    split = task.load_split(task.load_data(yaml_path), "val")
    image, objects = render_instances("val", 1)
    assert len(split.labels[1]) == len(objects) > 0
    for shape, (_, mask) in zip(split.extras[1], objects):
        assert np.array_equal(shape.rasterize(*mask.shape), mask)
    masks = np.stack([m for _, m in objects])
    assert masks.sum(0).max() == 1  # visible parts never overlap
    assert ensure_shapes_inst(tmp_path, split_sizes={"train": 4, "val": 2}) == yaml_path  # cached


def test_fraction_keeps_each_image_with_its_own_masks(tmp_path: Path) -> None:
    """``fraction=`` cuts the split's per-image lists together (its ``extras`` too) and keeps what
    the pipelines need: every kept image's masks still match its boxes."""
    from libreyolo_models.tasks.segment.shapes_inst import ensure_shapes_inst
    from libreyolo_models.train.fit_options import OptionedTask

    data = ensure_shapes_inst(tmp_path, split_sizes={"train": 8, "val": 1})
    task = OptionedTask(get_task("segment"), fraction=0.5, seed=0)
    part = task.load_split(task.load_data(str(data)), "train")
    full = get_task("segment").load_split(str(data), "train")
    assert len(part) == 4 and set(part.images) < set(full.images)
    for image, labels, extras in zip(part.images, part.labels, part.extras):
        i = full.images.index(image)
        assert np.array_equal(labels, full.labels[i]) and len(extras) == len(full.extras[i])
    pipeline = task.val_pipeline(part, imgsz=64, batch_size=4, device="cpu", workers=0, cache=False)
    for sample in next(iter(pipeline)).targets:
        assert sample.masks is not None and len(sample.masks) == len(sample.boxes)
