"""Semantic data: reading and checking masks, the bundled shapes-seg set, joint augmentation, batches."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from libreyolo_models.data.augment_draws import AugmentConfig
from libreyolo_models.data.errors import DataConfigError, EmptySplitError
from libreyolo_models.data.image_files import read_image
from libreyolo_models.data.letterbox_images import letterbox, letterbox_batch
from libreyolo_models.tasks import get_task
from libreyolo_models.tasks.semantic.augment import draw_mask_params, render_pairs
from libreyolo_models.tasks.semantic.mask_files import mask_path_for
from libreyolo_models.tasks.semantic.pipeline import MaskTrainPipeline, MaskValPipeline
from libreyolo_models.tasks.semantic.shapes_seg import generate_shapes_seg

TASK = get_task("semantic")


def _pair(root: Path, name: str, *, size=(24, 32), image_mode="RGB", mask=None) -> Path:  # noqa: ANN001
    """Write images/train/<name>.png and (unless mask is False) masks/train/<name>.png."""
    h, w = size
    rng = np.random.default_rng(len(name))
    pixels = rng.integers(0, 255, (h, w, 3), dtype=np.uint8)
    image = Image.fromarray(pixels).convert(image_mode)
    path = root / "images" / "train" / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path)
    if mask is not False:
        values = mask if mask is not None else (np.arange(h * w).reshape(h, w) % 3).astype(np.uint8)
        out = mask_path_for(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(values).save(out)
    return path


def _yaml(root: Path, names: str = "[bg, a, b]") -> Path:
    (root / "data.yaml").write_text(f"path: {root}\ntrain: images/train\nval: images/train\nnames: {names}\n")
    return root / "data.yaml"


@pytest.fixture
def messy(tmp_path: Path) -> Path:
    _pair(tmp_path, "good")
    _pair(tmp_path, "no_mask", mask=False)
    _pair(tmp_path, "other_size", mask=np.zeros((24, 30), dtype=np.uint8))
    _pair(tmp_path, "bad_ids", mask=np.full((24, 32), 7, dtype=np.uint8))
    colour = np.zeros((24, 32, 3), dtype=np.uint8)
    colour[..., 0] = 1
    Image.fromarray(colour).save(mask_path_for(_pair(tmp_path, "colour_mask", mask=False)))
    grey3 = np.repeat((np.arange(24 * 32).reshape(24, 32) % 3).astype(np.uint8)[..., None], 3, axis=2)
    Image.fromarray(grey3).save(mask_path_for(_pair(tmp_path, "grey_rgb_mask", mask=False)))
    _pair(tmp_path, "gray_image", image_mode="L")
    _pair(tmp_path, "rgba_image", image_mode="RGBA")
    ignored = np.full((24, 32), 255, dtype=np.uint8)
    ignored[:4] = 2
    _pair(tmp_path, "mostly_ignored", mask=ignored)
    (tmp_path / "images" / "train" / "truncated.png").write_bytes(
        (tmp_path / "images" / "train" / "good.png").read_bytes()[:60])
    return _yaml(tmp_path)


def test_bad_pairs_are_named_with_the_fix_and_the_rest_are_used(messy: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        split = TASK.load_split(str(messy), "train")
    kept = sorted(p.stem for p in split.images)
    assert kept == ["good", "gray_image", "grey_rgb_mask", "mostly_ignored", "rgba_image"]
    reasons = {p.path.stem: (p.skipped, p.reason) for p in split.problems}
    assert reasons["no_mask"][0] and "no mask: expected" in reasons["no_mask"][1]
    assert str(messy.parent / "masks" / "train" / "no_mask.png") in reasons["no_mask"][1]
    assert reasons["other_size"][0] and "is 30x24 (w x h) but its image is 32x24" in reasons["other_size"][1]
    assert "nearest-neighbour" in reasons["other_size"][1]
    assert reasons["bad_ids"][0] and "class id(s) 7 outside 0..2 (nc=3" in reasons["bad_ids"][1]
    assert "list those classes under 'names'" in reasons["bad_ids"][1]
    assert reasons["colour_mask"][0] and "colour-coded label image" in reasons["colour_mask"][1]
    assert "single-channel (PNG mode L" in reasons["colour_mask"][1]
    assert reasons["truncated"][0]
    assert reasons["grey_rgb_mask"] == (False, reasons["grey_rgb_mask"][1]) and "channels are equal" in reasons[
        "grey_rgb_mask"][1]
    assert not reasons["gray_image"][0] and "grayscale image (mode L): used as RGB" in reasons["gray_image"][1]
    assert not reasons["rgba_image"][0] and "alpha channel (mode RGBA)" in reasons["rgba_image"][1]
    assert any("skipped" in r.message and "no_mask.png" in r.message for r in caplog.records)
    # per-class pixel counts: 4 rows of class 2 in mostly_ignored, the rest of it ignored
    assert int(split.pixels[-1]) == 20 * 32 and split.pixels.sum() == 5 * 24 * 32


def test_a_messy_split_trains_an_epoch_without_stopping(messy: Path) -> None:
    split = TASK.load_split(str(messy), "train")
    pipe = MaskTrainPipeline(split, imgsz=32, batch_size=2, device="cpu", augment=AugmentConfig(), workers=0,
                             seed=0, gpu_augment=False, cache="disk", cache_dir=messy.parent / "cache")
    pipe.set_epoch(0)
    batches = list(pipe)
    assert len(batches) == 2 and all(b.images.shape == (2, 3, 32, 32) and b.targets.shape == (2, 32, 32)
                                     for b in batches)
    assert set(torch.cat([b.targets.flatten() for b in batches]).unique().tolist()) <= {0, 1, 2, 255}


def test_exif_rotation_mismatch_says_how_to_fix_it(tmp_path: Path) -> None:
    path = tmp_path / "images" / "train" / "rotated.jpg"
    path.parent.mkdir(parents=True)
    exif = Image.Exif()
    exif[0x0112] = 6  # displayed rotated by 90 degrees: 24x32 stored, 32x24 shown
    Image.fromarray(np.zeros((24, 32, 3), dtype=np.uint8)).save(path, exif=exif)
    mask = mask_path_for(path)
    mask.parent.mkdir(parents=True)
    Image.fromarray(np.zeros((24, 32), dtype=np.uint8)).save(mask)
    _pair(tmp_path, "fine")
    split = TASK.load_split(str(_yaml(tmp_path)), "train")
    (problem,) = split.problems
    assert problem.path == path and "EXIF rotation" in problem.reason and "rotate the mask" in problem.reason


def test_a_split_without_any_mask_is_one_clear_error(tmp_path: Path) -> None:
    for i in range(3):
        _pair(tmp_path, f"img{i}", mask=False)
    with pytest.raises(EmptySplitError, match=r"none of the 3 images has a mask .*'masks' folder beside 'images'"):
        TASK.load_split(str(_yaml(tmp_path)), "train")


def test_detection_data_and_too_many_classes_are_refused(tmp_path: Path) -> None:
    with pytest.raises(DataConfigError, match=r"bundled detect set \(boxes\); a semantic model cannot use it: use data=.shapes-seg."):
        TASK.load_data("shapes")
    _pair(tmp_path, "x")
    (tmp_path / "data.yaml").write_text(f"path: {tmp_path}\ntrain: images/train\nval: images/train\nnc: 300\n")
    with pytest.raises(DataConfigError, match="300 classes; semantic masks hold ids 0..254"):
        TASK.load_data(str(tmp_path / "data.yaml"))


def test_masks_dir_key_moves_the_masks(tmp_path: Path) -> None:
    image = _pair(tmp_path, "a", mask=False)
    other = mask_path_for(image, "labels_png")
    other.parent.mkdir(parents=True)
    Image.fromarray(np.zeros((24, 32), dtype=np.uint8)).save(other)
    data = _yaml(tmp_path)
    data.write_text(data.read_text() + "masks_dir: labels_png\n")
    assert TASK.load_split(str(data), "train").masks == [other]


def test_shapes_seg_pairs_fit_and_generation_repeats_byte_for_byte(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        generate_shapes_seg(tmp_path / name, split_sizes={"train": 3, "val": 1})
    split = TASK.load_split(str(tmp_path / "a" / "data.yaml"), "train")
    assert len(split) == 3 and not split.problems and split.nc == 6 and split.names[0] == "background"
    assert (split.pixels[:-1] > 0).sum() >= 3 and split.pixels[-1] > 0  # shapes, background and rims
    for mask in split.masks:
        twin = tmp_path / "b" / mask.relative_to(tmp_path / "a")
        assert mask.read_bytes() == twin.read_bytes()


def _striped(size: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """A slot whose red channel is 40 x class id, class ids in vertical stripes 8 px wide."""
    classes = (torch.arange(size) // 8 % 4).expand(size, size)
    image = torch.stack((classes * 40, torch.full_like(classes, 90), torch.full_like(classes, 30)), -1)
    return image.to(torch.uint8)[None], classes.to(torch.uint8)[None]


def _params(r: float, ux: float, uy: float, flip: bool) -> torch.Tensor:
    return torch.tensor([[r, ux, uy, float(flip), 0.0, 1.0, 1.0]], dtype=torch.float64)


def test_unit_scale_renders_the_image_and_its_mirror_exactly() -> None:
    slot, mask = _striped()
    hw = torch.tensor([[32, 32]])
    image, labels = render_pairs(slot, mask, hw, _params(1.0, 0.5, 0.5, False), 32)
    assert torch.equal(labels, mask) and torch.allclose(image[0].permute(1, 2, 0), slot[0].float(), atol=1e-3)
    image, labels = render_pairs(slot, mask, hw, _params(1.0, 0.5, 0.5, True), 32)
    assert torch.equal(labels, mask.flip(-1))


@pytest.mark.parametrize("r,ux,uy,flip", [(0.6, 0.3, 0.8, False), (1.4, 0.9, 0.1, True), (0.8, 0.0, 1.0, True)])
def test_image_and_mask_move_together_and_padding_is_ignored(r: float, ux: float, uy: float, flip: bool) -> None:
    slot, mask = _striped()
    image, labels = render_pairs(slot, mask, torch.tensor([[32, 32]]), _params(r, ux, uy, flip), 32)
    red, labels = image[0, 0], labels[0].long()
    pure = (red / 40 - (red / 40).round()).abs() < 1e-3  # not blended across a stripe edge
    inside = labels != 255
    assert int((pure & inside).sum()) > 200
    assert torch.equal((red[pure & inside] / 40).round().long(), labels[pure & inside])
    assert torch.all(image[0, :, ~inside] == 114)  # outside the scaled image: grey pixels, ignored labels
    assert (r < 1) == bool((~inside).any())


def test_one_sample_at_a_time_equals_the_whole_batch() -> None:
    torch.manual_seed(0)
    slots = torch.randint(0, 256, (3, 40, 40, 3), dtype=torch.uint8)
    masks = torch.randint(0, 5, (3, 40, 40), dtype=torch.uint8)
    hw = torch.tensor([[40, 30], [20, 40], [40, 40]])
    cfg = AugmentConfig(scale=0.5, fliplr=0.5, hsv_h=0.02, hsv_s=0.5, hsv_v=0.3)
    params = torch.from_numpy(np.stack([draw_mask_params(cfg, index=i, seed=3, rank=0, epoch=1) for i in range(3)]))
    images, labels = render_pairs(slots, masks, hw, params, 32)
    for i in range(3):
        one_image, one_label = render_pairs(slots[i:i + 1], masks[i:i + 1], hw[i:i + 1], params[i:i + 1], 32)
        assert torch.allclose(one_image, images[i:i + 1], atol=1e-4) and torch.equal(one_label, labels[i:i + 1])


def test_draws_are_a_function_of_seed_rank_epoch_and_index() -> None:
    cfg = AugmentConfig()
    one = draw_mask_params(cfg, index=4, seed=0, rank=0, epoch=2)
    assert np.array_equal(one, draw_mask_params(cfg, index=4, seed=0, rank=0, epoch=2))
    for other in ({"epoch": 3}, {"rank": 1}, {"index": 5}, {"seed": 1}):
        args = {"index": 4, "seed": 0, "rank": 0, "epoch": 2, **other}
        assert not np.array_equal(one, draw_mask_params(cfg, **args))
    assert 0.5 <= one[0] <= 1.5 and one[3] in (0.0, 1.0)


@pytest.fixture(scope="module")
def mini_seg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mini-seg")
    generate_shapes_seg(root, split_sizes={"train": 4, "val": 3})
    return root / "data.yaml"


def test_worker_path_and_batch_path_give_the_same_batches(mini_seg: Path, tmp_path: Path) -> None:
    split = TASK.load_split(str(mini_seg), "train")
    runs = []
    for gpu_augment in (False, True):
        pipe = MaskTrainPipeline(split, imgsz=64, batch_size=2, device="cpu", augment=AugmentConfig(), workers=0,
                                 seed=5, gpu_augment=gpu_augment, cache="disk", cache_dir=tmp_path)
        pipe.set_epoch(1)
        runs.append(list(pipe))
    for cpu, batched in zip(*runs):
        assert cpu.paths == batched.paths and torch.equal(cpu.targets, batched.targets)
        assert torch.allclose(cpu.images, batched.images, atol=0.5 / 255 + 1e-6)  # the worker rounds to uint8
        assert cpu.images.dtype == torch.float32 and 0.0 <= float(cpu.images.min()) and float(cpu.images.max()) <= 1.0


def test_validation_sees_predicts_pixels_and_the_original_masks(mini_seg: Path) -> None:
    split = TASK.load_split(str(mini_seg), "val")
    (batch,) = list(MaskValPipeline(split, imgsz=64, batch_size=3, device="cpu", workers=0))
    for i, path in enumerate(batch.paths):
        image = read_image(path)
        assert torch.equal(batch.images[i], letterbox_batch([torch.from_numpy(image)], 64)[0][0])  # predict's
        assert (batch.images[i] - letterbox(image, 64)[0]).abs().max() <= 1 / 255 + 1e-6  # the CPU reference
        assert batch.targets[i].shape == image.shape[:2] and batch.infos[i].orig_shape == image.shape[:2]


def test_detection_only_augmentations_are_named_as_having_no_effect(mini_seg: Path, tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    from libreyolo_models.train.settings import TrainConfig

    split = TASK.load_split(str(mini_seg), "train")
    cfg = TrainConfig(data="shapes-seg", mosaic=1.0, degrees=5.0, translate=0.0, cache="disk")
    with caplog.at_level(logging.WARNING):
        TASK.train_pipeline(split, imgsz=64, batch_size=2, device=torch.device("cpu"), cfg=cfg, workers=0)
    assert "degrees=5, mosaic=1: no effect on semantic training" in caplog.text


def test_an_image_broken_after_the_check_is_left_out_by_name_and_the_rest_train(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    for name in ("a", "b", "c", "d"):
        _pair(tmp_path, name)
    split = TASK.load_split(str(_yaml(tmp_path)), "train")
    broken = tmp_path / "images" / "train" / "c.png"
    broken.write_bytes(broken.read_bytes()[:60])  # changed after the check: only the cache build sees it
    with caplog.at_level(logging.WARNING):
        pipe = MaskTrainPipeline(split, imgsz=32, batch_size=3, device="cpu", augment=AugmentConfig(), workers=0,
                                 seed=0, gpu_augment=False, cache="disk", cache_dir=tmp_path / "cache")
    assert [p.path for p in pipe.skipped] == [broken]
    assert any("skipped" in r.message and str(broken) in r.message for r in caplog.records)
    pipe.set_epoch(0)
    (batch,) = list(pipe)
    assert sorted(Path(p).name for p in batch.paths) == ["a.png", "b.png", "d.png"]


def test_a_16_bit_image_is_scaled_like_a_viewer_for_semantic_training(tmp_path: Path) -> None:
    path = _pair(tmp_path, "deep")
    _pair(tmp_path, "plain")
    ramp = (np.arange(24 * 32, dtype=np.uint16).reshape(24, 32) * 80).astype(np.uint16)  # 0 .. 61360
    Image.fromarray(ramp).save(path)  # PNG mode I;16: convert("RGB") alone would clip it to white
    split = TASK.load_split(str(_yaml(tmp_path)), "train")
    assert path in split.images
    pipe = MaskTrainPipeline(split, imgsz=32, batch_size=2, device="cpu", augment=AugmentConfig(), workers=0,
                             seed=0, gpu_augment=False, cache="disk", cache_dir=tmp_path / "cache")
    index = split.images.index(path)
    h, w = (int(v) for v in pipe.cache.hw[index])
    cached = pipe.cache.read(index)[..., 0].astype(np.int64)
    expected = np.asarray(Image.fromarray((ramp.astype(np.float64) * 255 / 65535).round().astype(np.uint8))
                          .resize((w, h), Image.BILINEAR), dtype=np.int64)
    assert cached.min() < 10 and cached.max() > 200  # a ramp, not a white page
    assert np.abs(cached - expected).mean() < 8


def test_validation_skips_a_pair_broken_after_the_check_by_name(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    for name in ("a", "b", "c"):
        _pair(tmp_path, name)
    split = TASK.load_split(str(_yaml(tmp_path)), "val")
    broken = tmp_path / "images" / "train" / "b.png"
    broken.write_bytes(b"not a picture any more")
    pipe = MaskValPipeline(split, imgsz=32, batch_size=2, device="cpu", workers=0)
    with caplog.at_level(logging.WARNING):
        paths = [Path(p).name for batch in pipe for p in batch.paths]
    assert paths == ["a.png", "c.png"]
    assert any("skipped" in r.message and str(broken) in r.message for r in caplog.records)
