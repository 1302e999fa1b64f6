"""Masks and keypoints stay aligned with the pixels through every augmentation the instance tasks
honour (mosaic, affine with rotation, shear, scale and translation, flips with ``flip_idx``), and
the letterbox of validation; batches carry them row for row with the boxes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from libreyolo_models.data.augment_draws import AugmentConfig, draw_sample
from libreyolo_models.data.image_cache import open_image_cache
from libreyolo_models.tasks import get_task
from libreyolo_models.tasks.instances.geometry import compose_sample, letterbox_draw
from libreyolo_models.tasks.instances.pipeline import InstanceKind, InstanceTrainPipeline
from libreyolo_models.tasks.segment.mask_shapes import fill_polygon

WILD = AugmentConfig(mosaic=1.0, degrees=30.0, translate=0.1, scale=0.3, shear=8.0, hsv_h=0.0, hsv_s=0.0, hsv_v=0.0,
                     fliplr=0.5)
SIZES = ((96, 128), (128, 96), (110, 110), (128, 128))


@pytest.fixture(scope="module")
def segment_split(tmp_path_factory: pytest.TempPathFactory):
    """Four images whose white pixels are exactly their objects' polygons (on black)."""
    root = tmp_path_factory.mktemp("seg")
    rng = np.random.default_rng(0)
    (root / "images").mkdir()
    (root / "labels").mkdir()
    for i, (h, w) in enumerate(SIZES):
        image = np.zeros((h, w), bool)
        rows = []
        for _ in range(2):
            c = rng.uniform(0.25, 0.75, 2)
            poly = c + rng.uniform(-0.2, 0.2, (5, 2))
            image |= fill_polygon(poly * [w, h], h, w)
            rows.append("0 " + " ".join(f"{v:.6f}" for v in poly.reshape(-1)))
        Image.fromarray(np.repeat(image[..., None] * 255, 3, 2).astype(np.uint8)).save(root / "images" / f"{i}.png")
        (root / "labels" / f"{i}.txt").write_text("\n".join(rows) + "\n")
    (root / "data.yaml").write_text("train: images\nnames: [blob]\n")
    task = get_task("segment")
    return task.load_split(task.load_data(root / "data.yaml"), "train")


def test_masks_follow_the_pixels_through_mosaic_affine_and_flips(segment_split) -> None:
    cache = open_image_cache(segment_split.images, 96, mode="ram")
    flips = 0
    for index in range(8):
        draw = draw_sample(WILD, index=index % 4, n_images=4, imgsz=96, seed=1, rank=0, epoch=index, mosaic=index % 2 == 0)
        sample = compose_sample(cache, segment_split, draw, masks=True)
        flips += draw.flip
        bright = sample.image.float().mean(0) > 127
        union = sample.masks.any(0)

        iou = _overlap(bright, union, 0, 0)
        assert iou > 0.7, f"draw {index}: masks and pixels overlap by IoU {iou:.3f}"
        # aligned to the pixel: any shift of the masks by one or two pixels overlaps less
        assert all(_overlap(bright, union, dy, dx) < iou for dy in range(-2, 3) for dx in range(-2, 3) if dy or dx)
        for mask, box in zip(sample.masks, sample.boxes):
            if mask.sum() >= 30:  # a sliver is mostly rim, which the resize and the warp blur
                assert bright[mask].float().mean() > 0.75
            ys, xs = mask.nonzero(as_tuple=True)
            assert box.tolist() == [xs.min().item(), ys.min().item(), xs.max().item() + 1, ys.max().item() + 1]
    assert 0 < flips < 8


def _overlap(bright: torch.Tensor, masks: torch.Tensor, dy: int, dx: int) -> float:
    moved = torch.roll(masks, (dy, dx), (0, 1))
    return float((bright & moved).sum() / (bright | moved).sum())


def test_validation_letterbox_keeps_each_mask_exact(segment_split) -> None:
    cache = open_image_cache(segment_split.images, 64, mode="ram")
    sample = compose_sample(cache, segment_split, letterbox_draw(0, 64), masks=True)  # 96 x 128 -> 48 x 64
    x0, y0, x1, y1 = sample.region
    assert (x0, y0, x1, y1) == (0, 8, 64, 56)
    for shape, mask in zip(segment_split.extras[0], sample.masks):
        assert torch.equal(mask[y0:y1, x0:x1], torch.from_numpy(shape.rasterize(48, 64)))
        assert not mask[:y0].any() and not mask[y1:].any()


COLOURS = np.array([[255, 0, 0], [0, 255, 0], [0, 0, 255]])
FLIP = (0, 2, 1)


@pytest.fixture(scope="module")
def pose_split(tmp_path_factory: pytest.TempPathFactory):
    """Images whose keypoints are coloured dots (red, green, blue), with a flip map swapping the last two."""
    root = tmp_path_factory.mktemp("pose")
    rng = np.random.default_rng(1)
    (root / "images").mkdir()
    (root / "labels").mkdir()
    for i, (h, w) in enumerate(SIZES):
        image = np.zeros((h, w, 3), np.uint8)
        points = rng.uniform(0.2, 0.8, (3, 2)) * [w, h]
        for p, colour in zip(points, COLOURS):
            x, y = int(p[0]), int(p[1])
            image[y - 3:y + 4, x - 3:x + 4] = colour
        centres = (points.astype(int) + 0.5) / [w, h]
        lo, hi = centres.min(0) - 0.05, centres.max(0) + 0.05
        row = [0, *(lo + hi) / 2, *(hi - lo)] + [v for c in centres for v in (*c, 2)]
        Image.fromarray(image).save(root / "images" / f"{i}.png")
        (root / "labels" / f"{i}.txt").write_text(" ".join(f"{v:.6f}" for v in row) + "\n")
    (root / "data.yaml").write_text("train: images\nnames: [dots]\nkpt_shape: [3, 3]\nflip_idx: [0, 2, 1]\n")
    task = get_task("pose")
    return task.load_split(task.load_data(root / "data.yaml"), "train")   # a PoseSplit: the split itself


def test_keypoints_land_on_their_dots_and_flips_swap_left_and_right(pose_split) -> None:
    cache = open_image_cache(pose_split.images, 128, mode="ram")
    soft = AugmentConfig(mosaic=1.0, degrees=25.0, translate=0.1, scale=0.1, shear=5.0, hsv_h=0.0, hsv_s=0.0,
                         hsv_v=0.0, fliplr=0.5)
    checked = flipped = 0
    for index in range(10):
        draw = draw_sample(soft, index=index % 4, n_images=4, imgsz=128, seed=3, rank=0, epoch=index, mosaic=index % 2 == 0)
        sample = compose_sample(cache, pose_split, draw, keypoints=True, flip_idx=FLIP)
        image = sample.image.permute(1, 2, 0).float().numpy()
        for obj in sample.keypoints.numpy():
            for j, (x, y, v) in enumerate(obj):
                if v == 0:
                    continue
                expected = COLOURS[FLIP[j] if draw.flip else j]
                seen = image[int(y), int(x)]
                assert int(np.argmax(seen)) == int(np.argmax(expected)) and seen.max() > 100, (index, j, seen)
                checked += 1
                flipped += draw.flip
    assert checked > 20 and flipped > 5


def test_keypoints_leaving_the_image_lose_their_visibility(pose_split) -> None:
    cache = open_image_cache(pose_split.images, 128, mode="ram")
    wide = AugmentConfig(mosaic=1.0, degrees=0.0, translate=0.5, scale=0.9, shear=0.0, fliplr=0.0)
    hidden = 0
    for index in range(12):
        draw = draw_sample(wide, index=index % 4, n_images=4, imgsz=128, seed=5, rank=0, epoch=index, mosaic=True)
        kp = compose_sample(cache, pose_split, draw, keypoints=True, flip_idx=FLIP).keypoints
        inside = ((kp[..., :2] >= 0) & (kp[..., :2] < 128)).all(-1)
        assert not ((kp[..., 2] > 0) & ~inside).any()
        hidden += int((kp[..., 2] == 0).sum())
    assert hidden > 0


def test_training_batches_carry_masks_row_for_row_with_the_boxes(segment_split) -> None:
    pipe = InstanceTrainPipeline(segment_split, imgsz=64, batch_size=2, device="cpu", augment=WILD,
                                 kind=InstanceKind(masks=True), workers=0, seed=0, cache="ram")
    pipe.set_epoch(0, mosaic=True)
    batch = next(iter(pipe))
    targets = batch.targets
    assert batch.images.shape == (2, 3, 64, 64) and targets.masks is not None
    assert targets.masks.shape == (len(targets.boxes), 16, 16) and targets.masks.dtype == torch.uint8
    filled = [(row, mask) for row, mask in zip(targets.boxes, targets.masks) if mask.any()]
    assert len(filled) >= len(targets.boxes) / 2  # an object under half a cell wide may pool to nothing
    for row, mask in filled:
        ys, xs = mask.nonzero(as_tuple=True)
        cx, cy = row[2] * 16, row[3] * 16
        assert xs.float().min() - 1 <= cx <= xs.float().max() + 2 and ys.float().min() - 1 <= cy <= ys.float().max() + 2


def test_pose_without_flip_idx_turns_mirroring_off(tmp_path: Path, pose_split, caplog) -> None:
    from libreyolo_models.tasks.pose.task import PoseTask

    yaml = Path(pose_split.images[0]).parent.parent / "data.yaml"
    text = yaml.read_text().replace("flip_idx: [0, 2, 1]\n", "")
    (tmp_path / "noflip.yaml").write_text(text.replace("train: images", f"path: {yaml.parent}\ntrain: images"))
    task = PoseTask()
    data = task.load_data(tmp_path / "noflip.yaml")
    split = task.load_split(data, "train")

    class Options:
        seed, gpu_augment, cache, label_smoothing = 0, False, "ram", 0.0

        def augment(self) -> AugmentConfig:
            return AugmentConfig(fliplr=0.5)

        def classify_augment(self) -> None:
            return None

    with caplog.at_level("WARNING"):
        pipe = task.train_pipeline(split, imgsz=64, batch_size=2, device=torch.device("cpu"), cfg=Options(), workers=0)
    assert "no flip_idx" in caplog.text
    assert pipe._loader.dataset.augment.fliplr == 0.0
