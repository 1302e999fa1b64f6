"""COCO-JSON splits: category mapping, box conversion, crowd and bad annotations, image folders."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from libreyolo_models.data import image_check
from libreyolo_models.data.data_config import load_data_config
from libreyolo_models.data.errors import DataConfigError, EmptySplitError
from libreyolo_models.tasks.detect.datasets import load_split


def _coco(root: Path, images: list[dict], annotations: list[dict], *, categories: list[dict] | None = None,
          image_dir: str = "annotations/images", yaml_extra: str = "") -> Path:
    """A dataset with ``annotations/val.json``; each image entry's file is written 32x32 (or w x h)."""
    (root / "annotations").mkdir(parents=True)
    for entry in images:
        path = root / image_dir / entry["file_name"]
        path.parent.mkdir(parents=True, exist_ok=True)
        size = entry.get("_file_size", (entry.get("width", 32), entry.get("height", 32)))
        Image.new("RGB", size, (200, 60, 60)).save(path)
    doc = {"images": [{k: v for k, v in e.items() if not k.startswith("_")} for e in images],
           "annotations": annotations,
           "categories": categories if categories is not None else [{"id": 7, "name": "dog"},
                                                                      {"id": 3, "name": "cat"}]}
    (root / "annotations" / "val.json").write_text(json.dumps(doc))
    (root / "data.yaml").write_text(f"train: annotations/val.json\nval: annotations/val.json\n{yaml_extra}")
    return root / "data.yaml"


def _ann(aid: int, image_id: int, cat: int, bbox: list[float], **kw: object) -> dict:
    return {"id": aid, "image_id": image_id, "category_id": cat, "bbox": bbox, **kw}


def test_categories_map_to_contiguous_ids_in_sorted_id_order_and_name_the_classes(tmp_path: Path) -> None:
    cfg = load_data_config(_coco(tmp_path, [{"id": 1, "file_name": "a.jpg", "width": 32, "height": 32}], []))
    assert cfg.names == {0: "cat", 1: "dog"}  # id 3 before id 7


def test_pixel_xywh_boxes_become_normalized_centre_rows(tmp_path: Path) -> None:
    images = [{"id": 1, "file_name": "a.jpg", "width": 64, "height": 32}]
    anns = [_ann(1, 1, 7, [8, 4, 16, 8]), _ann(2, 1, 3, [0, 0, 64, 32])]
    index = load_split(load_data_config(_coco(tmp_path, images, anns)), "val", cache=False)
    assert index.images == [tmp_path / "annotations" / "images" / "a.jpg"]
    assert index.sizes == [(32, 64)]
    np.testing.assert_allclose(index.labels[0], [[1, 16 / 64, 8 / 32, 16 / 64, 8 / 32], [0, 0.5, 0.5, 1, 1]],
                               atol=1e-7)
    assert index.problems == []


def test_crowd_annotations_are_skipped_and_counted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    images = [{"id": 1, "file_name": "a.jpg"}, {"id": 2, "file_name": "b.jpg"}]
    anns = [_ann(1, 1, 3, [1, 1, 10, 10]), _ann(2, 1, 3, [0, 0, 30, 30], iscrowd=1), _ann(3, 2, 7, [5, 5, 5, 5])]
    with caplog.at_level(logging.INFO):
        index = load_split(load_data_config(_coco(tmp_path, images, anns)), "val", cache=False)
    assert [len(lab) for lab in index.labels] == [1, 1]
    assert caplog.records[-1].getMessage() == ("val: 2 images, 2 boxes, 0 skipped, 0 backgrounds, "
                                               "1 crowd annotations ignored")


def test_image_without_annotations_is_a_background(tmp_path: Path) -> None:
    images = [{"id": 1, "file_name": "a.jpg"}, {"id": 2, "file_name": "sub/b.jpg"}]
    index = load_split(load_data_config(_coco(tmp_path, images, [_ann(1, 1, 3, [1, 1, 4, 4])])), "val")
    assert [len(lab) for lab in index.labels] == [1, 0] and index.problems == []


def test_unknown_category_skips_the_image_naming_the_annotation(tmp_path: Path) -> None:
    images = [{"id": 1, "file_name": "a.jpg"}, {"id": 2, "file_name": "b.jpg"}]
    anns = [_ann(11, 1, 99, [1, 1, 4, 4]), _ann(12, 2, 3, [1, 1, 4, 4])]
    index = load_split(load_data_config(_coco(tmp_path, images, anns)), "val", cache=False)
    (problem,) = index.problems
    assert problem.path.name == "a.jpg" and problem.skipped
    assert problem.reason == "annotations in val.json: annotation 11: category_id 99 is not among the categories (ids 3, 7)"
    assert [p.name for p in index.images] == ["b.jpg"]


def test_box_outside_the_image_skips_it_and_zero_size_box_is_dropped(tmp_path: Path) -> None:
    images = [{"id": 1, "file_name": "a.jpg"}, {"id": 2, "file_name": "b.jpg"}]
    anns = [_ann(1, 1, 3, [40, 1, 10, 10]), _ann(2, 2, 3, [1, 1, 4, 4]), _ann(3, 2, 7, [5, 5, 0, 3])]
    index = load_split(load_data_config(_coco(tmp_path, images, anns)), "val", cache=False)
    bad, fixed = index.problems
    assert bad.path.name == "a.jpg" and bad.skipped and "annotation 1: coordinates" in bad.reason
    assert fixed.path.name == "b.jpg" and not fixed.skipped and "zero-size box" in fixed.reason
    assert len(index.labels[0]) == 1


def test_size_in_json_disagreeing_with_the_file_skips_the_image(tmp_path: Path) -> None:
    images = [{"id": 1, "file_name": "a.jpg", "width": 32, "height": 32, "_file_size": (48, 32)},
              {"id": 2, "file_name": "b.jpg"}]
    index = load_split(load_data_config(_coco(tmp_path, images, [])), "val", cache=False)
    (problem,) = index.problems
    assert problem.path.name == "a.jpg" and "32x32 but the file is 48x32" in problem.reason


def test_coco_images_key_points_each_split_at_its_folder(tmp_path: Path) -> None:
    images = [{"id": 1, "file_name": "a.jpg"}]
    path = _coco(tmp_path, images, [], image_dir="val2017", yaml_extra="coco_images: {val: val2017}\n")
    cfg = load_data_config(path)
    assert load_split(cfg, "val").images == [tmp_path / "val2017" / "a.jpg"]
    with pytest.raises(EmptySplitError, match=r"train: the images of .*val\.json.*coco_images"):
        load_split(cfg, "train")  # no coco_images entry for train, no images/ beside the JSON


def test_images_folder_beside_the_annotations_folder_is_found(tmp_path: Path) -> None:
    path = _coco(tmp_path, [{"id": 1, "file_name": "a.jpg"}], [], image_dir="images")
    assert load_split(load_data_config(path), "val").images == [tmp_path / "images" / "a.jpg"]


def test_missing_annotations_list_names_the_json_and_key(tmp_path: Path) -> None:
    path = _coco(tmp_path, [{"id": 1, "file_name": "a.jpg"}], [])
    json_path = tmp_path / "annotations" / "val.json"
    doc = json.loads(json_path.read_text())
    del doc["annotations"]
    json_path.write_text(json.dumps(doc))
    with pytest.raises(DataConfigError, match=r"val\.json: missing list 'annotations'"):
        load_data_config(path)


def test_yaml_names_must_match_the_category_count(tmp_path: Path) -> None:
    cfg = load_data_config(_coco(tmp_path, [{"id": 1, "file_name": "a.jpg"}], [], yaml_extra="names: [a, b, c]\n"))
    with pytest.raises(DataConfigError, match=r"val\.json has 2 categories but .*data\.yaml defines 3 classes"):
        load_split(cfg, "val")


def test_coco_split_scan_is_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Path] = []
    real = image_check.check_image
    monkeypatch.setattr(image_check, "check_image", lambda p: calls.append(p) or real(p))
    cfg = load_data_config(_coco(tmp_path, [{"id": 1, "file_name": "a.jpg"}], [_ann(1, 1, 3, [1, 1, 4, 4])]))
    first, second = load_split(cfg, "val"), load_split(cfg, "val")
    assert len(calls) == 1
    assert (tmp_path / "annotations" / "val.val.cache.npz").is_file()
    np.testing.assert_array_equal(first.labels[0], second.labels[0])
