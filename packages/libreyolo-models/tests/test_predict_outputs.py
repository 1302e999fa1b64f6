"""Predict outputs: YOLO-format labels, crops, show without a display, agnostic NMS, and the
Results conversions (JSON, CSV, NumPy, devices)."""

from __future__ import annotations

import csv
import io
import json
import logging

import numpy as np
import pytest
import torch
from PIL import Image

from libreyolo_models import SAMPLE_IMAGE, LibreYOLO9
from libreyolo_models.tasks.results import Boxes, Results

IMGSZ = 128
NAMES = ["circle", "square", "triangle"]


@pytest.fixture(scope="module")
def model() -> LibreYOLO9:
    torch.manual_seed(0)
    m = LibreYOLO9(size="t", nc=3, names=NAMES, imgsz=IMGSZ)
    with torch.no_grad():  # lift the untrained class scores so NMS keeps boxes of several classes
        for seq in m.net.head.cv3:
            seq[-1].bias.copy_(torch.tensor([0.6, 0.7, 0.5]))
    return m


def _results() -> Results:
    """Two hand-made boxes on a 100 x 200 (h x w) image: known numbers for every format."""
    image = np.zeros((100, 200, 3), np.uint8)
    image[10:50, 20:60] = 255
    data = torch.tensor([[20.0, 10.0, 60.0, 50.0, 0.9, 1.0], [100.0, 0.0, 200.0, 100.0, 0.4, 0.0]])
    return Results(image, "img.png", dict(enumerate(NAMES)), boxes=Boxes(data, (100, 200)))


def test_save_txt_writes_yolo_labels_with_and_without_confidence(model, tmp_path) -> None:
    (res,) = model(SAMPLE_IMAGE, conf=0.3, max_det=10, save_txt=True, project=str(tmp_path), name="a")
    lines = (tmp_path / "a" / "labels" / f"{SAMPLE_IMAGE.stem}.txt").read_text().splitlines()
    assert len(lines) == len(res) > 0
    rows = np.array([[float(v) for v in line.split()] for line in lines])
    assert rows.shape == (len(res), 5)
    np.testing.assert_array_equal(rows[:, 0], res.boxes.cls.numpy())
    np.testing.assert_allclose(rows[:, 1:], res.boxes.xywhn.numpy(), atol=1e-6)
    assert not (tmp_path / "a" / f"{SAMPLE_IMAGE.stem}.jpg").exists()  # save=False: no annotated image

    model(SAMPLE_IMAGE, conf=0.3, max_det=10, save_txt=True, save_conf=True, project=str(tmp_path), name="b")
    rows = np.loadtxt(tmp_path / "b" / "labels" / f"{SAMPLE_IMAGE.stem}.txt", ndmin=2)
    assert rows.shape == (len(res), 6)
    np.testing.assert_allclose(rows[:, 5], res.boxes.conf.numpy(), atol=1e-6)


def test_save_crop_writes_each_box_under_its_class(model, tmp_path) -> None:
    (res,) = model(SAMPLE_IMAGE, conf=0.3, max_det=6, save_crop=True, project=str(tmp_path), name="c")
    crops = sorted((tmp_path / "c" / "crops").rglob("*.jpg"))
    assert len(crops) == len(res) > 0
    expected = {NAMES[int(c)] for c in res.boxes.cls.tolist()}
    assert {p.parent.name for p in crops} == expected
    x1, y1, x2, y2 = res.boxes.xyxy[0].tolist()
    first = Image.open(tmp_path / "c" / "crops" / NAMES[int(res.boxes.cls[0])] / f"{SAMPLE_IMAGE.stem}.jpg")
    assert abs(first.width - (x2 - x1)) <= 2 and abs(first.height - (y2 - y1)) <= 2


def test_show_without_a_display_warns_once_and_does_nothing(model, monkeypatch, caplog) -> None:
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr("sys.platform", "linux")
    opened: list[object] = []
    monkeypatch.setattr(Image.Image, "show", lambda self, *a, **k: opened.append(self))
    with caplog.at_level(logging.WARNING):
        results = model([SAMPLE_IMAGE, SAMPLE_IMAGE], conf=0.3, show=True)
    assert len(results) == 2 and opened == []
    warnings = [r for r in caplog.records if "no display" in r.getMessage()]
    assert len(warnings) == 1 and "save=True" in warnings[0].getMessage()


def test_show_with_a_display_opens_one_window_per_image(model, monkeypatch) -> None:
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.setattr("sys.platform", "linux")
    opened: list[tuple[int, int]] = []
    monkeypatch.setattr(Image.Image, "show", lambda self, *a, **k: opened.append(self.size))
    model([SAMPLE_IMAGE, SAMPLE_IMAGE], conf=0.3, show=True)
    assert opened == [(480, 360), (480, 360)]


def test_agnostic_nms_merges_overlapping_boxes_of_different_classes(model, monkeypatch) -> None:
    # Raw network output with three candidates: a square and a circle on almost the same spot
    # (IoU 0.82), and a far triangle. Class-aware NMS keeps all three; agnostic NMS drops the circle.
    raw = torch.zeros(1, 4 + 3, 3)
    raw[0, :4] = torch.tensor([[10.0, 12.0, 80.0], [10.0, 12.0, 80.0], [50.0, 52.0, 120.0],
                               [50.0, 52.0, 120.0]])
    raw[0, 4:, 0] = torch.tensor([0.0, 0.9, 0.0])   # square, 0.9
    raw[0, 4:, 1] = torch.tensor([0.8, 0.0, 0.0])   # circle, 0.8, overlapping the square
    raw[0, 4:, 2] = torch.tensor([0.0, 0.0, 0.7])   # triangle, 0.7, alone
    monkeypatch.setattr("libreyolo_models.predict.predictor.forward_for_predict", lambda *a, **k: lambda x: raw)
    image = np.zeros((IMGSZ, IMGSZ, 3), np.uint8)  # square input: no letterbox shift
    (aware,) = model(image, conf=0.3, iou=0.5)
    (agnostic,) = model(image, conf=0.3, iou=0.5, agnostic_nms=True)
    assert aware.boxes.cls.tolist() == [1.0, 0.0, 2.0]
    assert agnostic.boxes.cls.tolist() == [1.0, 2.0]
    assert agnostic.boxes.conf.tolist() == pytest.approx([0.9, 0.7])


def test_to_json_and_to_csv_carry_names_classes_scores_and_boxes() -> None:
    res = _results()
    rows = json.loads(res.to_json())
    assert rows == [
        {"name": "square", "class": 1, "confidence": 0.9, "box": {"x1": 20.0, "y1": 10.0, "x2": 60.0, "y2": 50.0}},
        {"name": "circle", "class": 0, "confidence": 0.4, "box": {"x1": 100.0, "y1": 0.0, "x2": 200.0, "y2": 100.0}},
    ]
    normalized = json.loads(res.to_json(normalize=True))
    assert normalized[0]["box"] == {"x1": 0.1, "y1": 0.1, "x2": 0.3, "y2": 0.5}
    table = list(csv.DictReader(io.StringIO(res.to_csv())))
    assert [r["name"] for r in table] == ["square", "circle"]
    assert table[1] == {"name": "circle", "class": "0", "confidence": "0.4", "x1": "100.0", "y1": "0.0",
                        "x2": "200.0", "y2": "100.0"}


def test_numpy_and_cpu_copies_keep_every_box_format() -> None:
    res = _results()
    arr = res.numpy()
    assert isinstance(arr.boxes.data, np.ndarray) and isinstance(res.boxes.data, torch.Tensor)
    np.testing.assert_allclose(arr.boxes.xywhn, res.boxes.xywhn.numpy(), atol=1e-7)
    np.testing.assert_allclose(arr.boxes.xywh, [[40, 30, 40, 40], [150, 50, 100, 100]])
    assert json.loads(arr.to_json()) == json.loads(res.to_json())
    assert arr.plot().shape == (100, 200, 3)
    back = arr.cpu()
    assert isinstance(back.boxes.data, torch.Tensor) and torch.equal(back.boxes.data, res.boxes.data)


def test_semantic_results_convert_too() -> None:
    from libreyolo_models.tasks.semantic.class_map import SemanticMask

    classes = torch.zeros(4, 6, dtype=torch.int64)
    classes[:, 3:] = 2
    res = Results(np.zeros((4, 6, 3), np.uint8), "m.png", {0: "bg", 1: "a", 2: "b"}, masks=SemanticMask(classes))
    assert json.loads(res.to_json()) == [{"name": "bg", "class": 0, "share": 0.5}, {"name": "b", "class": 2,
                                                                                    "share": 0.5}]
    assert res.to_csv().splitlines()[0] == "name,class,share"
    assert isinstance(res.numpy().masks.data, np.ndarray) and res.cpu().masks.data.equal(classes)


@pytest.mark.cuda
def test_cuda_moves_boxes_and_back() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    res = _results().cuda()
    assert res.boxes.data.is_cuda and res.boxes.xywhn.is_cuda
    assert torch.equal(res.cpu().boxes.data, _results().boxes.data)
