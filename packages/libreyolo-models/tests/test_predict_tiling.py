"""Tiled (sliced) predict and test-time augmentation: small objects of a 2000 x 2000 picture found
by tiles and missed untiled, tiled == untiled when one tile covers the picture, the window layout,
the merges, and TTA's mapping back."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from libreyolo_models import LibreYOLO, LibreYOLO9
from libreyolo_models.errors import ConfigError
from libreyolo_models.layers.box_merge import merge_detections
from libreyolo_models.predict.tiling import tile_windows
from libreyolo_models.predict.tta import VARIANTS, augment_batch, restore_boxes

SIDE = 16           # the objects' side in pixels
KERNEL = 12         # the fake detector sees an object only when a 12 x 12 window of it is red


def _red_square_detector(calls: list[tuple[int, ...]]):
    """A stand-in network over [B, 3, S, S] in [0, 1]: every 12 x 12 window (stride 4) that is all
    red is a box (the window grown by 2 px) of class 0 scoring 0.9; everything else scores 0.
    Objects drawn smaller than 12 px at the network's input are invisible to it, like a real
    detector's smallest stride. A 16 px object fills up to 2 x 2 windows, whose diagonal
    neighbours overlap by IoU 0.39: the tests run NMS at iou=0.3, so each object is one box."""
    def forward(net, images):
        calls.append(tuple(images.shape))
        red = ((images[:, 0] > 0.8) & (images[:, 1] < 0.3) & (images[:, 2] < 0.3)).float()[:, None]
        full = F.avg_pool2d(red, KERNEL, stride=4) > 0.999                          # [B, 1, h, w]
        b, _, h, w = full.shape
        ys, xs = torch.meshgrid(torch.arange(h) * 4.0, torch.arange(w) * 4.0, indexing="ij")
        boxes = torch.stack([xs - 2, ys - 2, xs + KERNEL + 2, ys + KERNEL + 2]).reshape(4, -1)
        scores = full.reshape(b, 1, -1).float() * 0.9
        return torch.cat([boxes.expand(b, 4, -1), scores, torch.zeros_like(scores)], 1)  # [B, 4 + 2, A]
    return forward


@pytest.fixture()
def fake_model(monkeypatch):
    torch.manual_seed(0)
    model = LibreYOLO9(size="t", nc=2, names=["red", "other"], imgsz=640)
    calls: list[tuple[int, ...]] = []
    monkeypatch.setattr(model.family, "inference_forward", _red_square_detector(calls))
    return model, calls


def _picture(corners: list[tuple[int, int]], size: int = 2000) -> np.ndarray:
    image = np.full((size, size, 3), 40, np.uint8)
    for x, y in corners:
        image[y:y + SIDE, x:x + SIDE] = (230, 20, 20)
    return image


# Scattered, and some across the borders of 640-pixel tiles at 20 % overlap (starts 0, 512, 1024, 1360).
CORNERS = [(100, 150), (630, 40), (505, 505), (1010, 1500), (1350, 700), (1900, 1950), (250, 1200), (1700, 300),
           (1021, 1021), (640, 1800)]


def test_small_objects_in_a_2000px_picture_are_found_tiled_and_missed_untiled(fake_model) -> None:
    model, calls = fake_model
    image = _picture(CORNERS)
    untiled = model.predict(image, conf=0.5, device="cpu", fuse=False)[0]
    assert len(untiled.boxes) == 0                     # 16 px shrink to 5 px at 640: invisible
    tiled = model.predict(image, conf=0.5, iou=0.3, device="cpu", fuse=False, tile=640, tile_overlap=0.2)[0]
    assert len(tiled.boxes) == len(CORNERS)
    found = sorted(tiled.boxes.xyxy[:, :2].round().int().tolist())
    for (x, y), (fx, fy) in zip(sorted(CORNERS), found):
        assert abs(fx - x) <= 4 and abs(fy - y) <= 4, (x, y, fx, fy)
    assert tiled.boxes.orig_shape == (2000, 2000) and tiled.orig_img.shape == (2000, 2000, 3)
    assert {"preprocess", "inference", "postprocess"} <= set(tiled.speed)
    # 16 windows of 640 (4 x 4), then the whole picture alone (a chunk of one runs unpadded)
    assert calls[-2:] == [(16, 3, 640, 640), (1, 3, 640, 640)]


def test_weighted_merge_finds_the_same_objects(fake_model) -> None:
    model, _ = fake_model
    tiled = model.predict(_picture(CORNERS), conf=0.5, iou=0.3, device="cpu", fuse=False, tile=640,
                          tile_merge="weighted")[0]
    assert len(tiled.boxes) == len(CORNERS)


def test_tiled_equals_untiled_when_one_tile_covers_the_picture() -> None:
    torch.manual_seed(0)
    model = LibreYOLO9(size="t", nc=3, names=["a", "b", "c"], imgsz=64)
    with torch.no_grad():   # lift the untrained head so there are boxes to compare
        for seq in model.net.head.cv3:
            seq[-1].bias.copy_(torch.tensor([0.3, 0.7, 0.2]))
    image = np.random.default_rng(0).integers(0, 255, (90, 130, 3), dtype=np.uint8)
    plain = model.predict(image, device="cpu", max_det=20)[0]
    tiled = model.predict(image, device="cpu", max_det=20, tile=130)[0]
    assert len(plain.boxes) > 0
    assert torch.equal(plain.boxes.data, tiled.boxes.data)


def test_windows_cover_the_picture_and_end_at_its_border() -> None:
    assert tile_windows(500, 400, 640, 0.2) == [(0, 0, 400, 500)]
    windows = tile_windows(1000, 1500, 640, 0.25)
    tiles, whole = windows[:-1], windows[-1]
    assert whole == (0, 0, 1500, 1000)
    assert sorted({x0 for x0, *_ in tiles}) == [0, 480, 860] and sorted({y0 for _, y0, *_ in tiles}) == [0, 360]
    assert all(x1 - x0 == 640 and y1 - y0 == 640 for x0, y0, x1, y1 in tiles)
    covered = np.zeros((1000, 1500), bool)
    for x0, y0, x1, y1 in tiles:
        covered[y0:y1, x0:x1] = True
    assert covered.all()


def test_merges_keep_the_best_box_or_average_the_cluster() -> None:
    rows = torch.tensor([[0, 0, 10, 10, 0.9, 0], [2, 0, 12, 10, 0.6, 0], [1, 0, 11, 10, 0.8, 1],
                         [50, 50, 60, 60, 0.7, 0]])
    assert merge_detections(rows, iou=0.5, max_det=10).tolist() == [rows[0].tolist(), rows[2].tolist(),
                                                                    rows[3].tolist()]
    weighted = merge_detections(rows, iou=0.5, max_det=10, mode="weighted")
    assert weighted[0, 0].item() == pytest.approx(2 * 0.6 / 1.5) and weighted[0, 4].item() == pytest.approx(0.9)
    assert weighted[1].tolist() == rows[2].tolist()                 # class 1 never merges with class 0
    assert len(merge_detections(rows, iou=0.5, max_det=10, agnostic=True)) == 2
    assert len(merge_detections(rows, iou=0.5, max_det=1)) == 1


def test_tta_runs_every_variant_in_one_pass_and_maps_boxes_back(fake_model) -> None:
    model, calls = fake_model
    image = _picture([(300, 200)], size=640)
    image[200:200 + SIDE, 300:300 + SIDE] = (230, 20, 20)
    big = np.full((640, 640, 3), 40, np.uint8)
    big[200:240, 300:340] = (230, 20, 20)     # 40 px: still >= 12 px at 0.67 of the size
    plain = model.predict(big, conf=0.5, device="cpu", fuse=False)[0]
    augmented = model.predict(big, conf=0.5, device="cpu", fuse=False, augment=True)[0]
    assert calls[-1] == (3, 3, 640, 640)                           # three variants, one forward
    assert {"preprocess", "inference", "postprocess"} <= set(augmented.speed)
    assert len(plain.boxes) >= 1 and len(augmented.boxes) >= 1
    centre = augmented.boxes.xywh[:, :2]
    assert ((centre - torch.tensor([320.0, 220.0])).abs() < 16).all()   # every merged box on the object


def test_augment_batch_and_restore_boxes_invert_each_other() -> None:
    x = torch.zeros((1, 3, 100, 100), dtype=torch.uint8)
    x[..., 10:20, 30:50] = 255
    out = augment_batch(x)
    assert out.shape == (3, 3, 100, 100) and torch.equal(out[0], x[0])
    for v, (scale, flipped) in enumerate(VARIANTS):
        ys, xs = torch.nonzero(out[v, 0] > 128, as_tuple=True)
        box = torch.tensor([[xs.min(), ys.min(), xs.max() + 1, ys.max() + 1, 1.0, 0.0]], dtype=torch.float32)
        back = restore_boxes(box, scale, flipped, 100)
        assert torch.allclose(back[0, :4], torch.tensor([30.0, 10, 50, 20]), atol=2.0), (v, back)


def test_tiling_and_tta_options_are_checked() -> None:
    model = LibreYOLO9(size="t", nc=2, imgsz=64)
    with pytest.raises(ConfigError, match=r"tile=16 must be a window side of at least 32"):
        model.predict(np.zeros((64, 64, 3), np.uint8), tile=16)
    with pytest.raises(ConfigError, match=r"tile_overlap=1.0 must be in \[0, 1\)"):
        model.predict(np.zeros((64, 64, 3), np.uint8), tile=64, tile_overlap=1.0)
    with pytest.raises(ConfigError, match=r"tile= and augment=True together"):
        model.predict(np.zeros((64, 64, 3), np.uint8), tile=64, augment=True)
    with pytest.raises(ConfigError, match=r"augment= is test-time augmentation for detection.*task is 'classify'; predict without augment="):
        LibreYOLO("LibreMobileNetV4small.yaml").predict(np.zeros((64, 64, 3), np.uint8), augment=True, device="cpu")
