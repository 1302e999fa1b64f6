"""Classification data: ImageFolder descriptions, bad files named by path, decoding, shapes-cls,
augmentation draws and the two augmentation paths, evaluation crops shared with predict."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from libreyolo_models.data.decode import read_image_file
from libreyolo_models.data.errors import DataConfigError, EmptySplitError
from libreyolo_models.data.shapes import CLASS_NAMES
from libreyolo_models.tasks.classify.augment import ClassifyAugment, draw_crop, draw_mix
from libreyolo_models.tasks.classify.folder_config import load_folder_data
from libreyolo_models.tasks.classify.folder_reader import load_class_split
from libreyolo_models.tasks.classify.ops import centre_crop, mix_batch, render_crops
from libreyolo_models.tasks.classify.pipeline import ClassifyTrainPipeline, ClassifyValPipeline
from libreyolo_models.tasks.classify.shapes_cls import generate_shapes_cls
from libreyolo_models.tasks.classify.task import ClassifyTask


def read_rgb8(path: Path) -> np.ndarray:
    return read_image_file(path)[0]


def _image(path: Path, colour: tuple[int, int, int], size: tuple[int, int] = (40, 30)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, colour).save(path)
    return path


def _folder_set(root: Path) -> Path:
    for split, n in (("train", 3), ("val", 1)):
        for name, colour in (("ant", (200, 10, 10)), ("bee", (10, 200, 10))):
            for i in range(n):
                _image(root / split / name / f"{i}.png", colour)
    return root


def test_a_folder_is_a_dataset_with_sorted_class_folders(tmp_path: Path) -> None:
    data = load_folder_data(_folder_set(tmp_path / "d"))
    assert data.names == {0: "ant", 1: "bee"} and data.val == tmp_path / "d" / "val" and data.test is None
    split = load_class_split(data, "train")
    assert len(split) == 6 and split.counts().tolist() == [3, 3]
    assert [p.parent.name for p in split.images] == ["ant"] * 3 + ["bee"] * 3


def test_yaml_names_fix_class_ids_and_unknown_keys_are_rejected(tmp_path: Path) -> None:
    _folder_set(tmp_path / "d")
    (tmp_path / "d.yaml").write_text("path: d\ntrain: train\nval: val\nnames: [bee, ant]\n")
    data = load_folder_data(tmp_path / "d.yaml")
    assert data.names == {0: "bee", 1: "ant"}
    assert load_class_split(data, "val").labels.tolist() == [0, 1]  # bee first now
    (tmp_path / "bad.yaml").write_text("path: d\nnmaes: [a]\n")
    with pytest.raises(DataConfigError, match="unknown key 'nmaes'.*did you mean 'names'"):
        load_folder_data(tmp_path / "bad.yaml")
    with pytest.raises(DataConfigError, match="without a 'train' folder or a data.yaml.*<root>/train/<class>"):
        load_folder_data(tmp_path / "d" / "train" / "ant")


def test_empty_class_folder_and_unreadable_image_are_named_with_the_fix(tmp_path: Path,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    root = _folder_set(tmp_path / "d")
    (root / "train" / "cow").mkdir()
    broken = root / "train" / "ant" / "broken.jpg"
    broken.write_bytes(b"not an image")
    (root / "train" / "stray.png").write_bytes((root / "train" / "ant" / "0.png").read_bytes())
    (tmp_path / "d.yaml").write_text("path: d\nnames: [ant, bee, cow]\n")
    with caplog.at_level(logging.WARNING):
        split = load_class_split(load_folder_data(tmp_path / "d.yaml"), "train")
    assert len(split) == 6 and broken not in split.images  # the bad file is left out, the rest is used
    text = caplog.text
    assert f"{root / 'train' / 'cow'}: class 2 'cow' has no images in the train split; add images" in text
    assert f"skipped {broken}: not an image PIL can identify" in text and "fix or delete the file" in text
    assert f"{root / 'train' / 'stray.png'}: image outside every class folder" in text
    (tmp_path / "e.yaml").write_text("path: d\nnames: [ant, bee]\n")
    with caplog.at_level(logging.WARNING):
        load_class_split(load_folder_data(tmp_path / "e.yaml"), "train")
    assert "folder 'cow' is not a class of" in caplog.text and "add it to names" in caplog.text


def test_a_split_without_usable_images_fails_before_training(tmp_path: Path) -> None:
    root = tmp_path / "d"
    (root / "train" / "ant").mkdir(parents=True)
    (root / "train" / "ant" / "x.jpg").write_bytes(b"garbage")
    with pytest.raises(EmptySplitError, match="no usable image in .*train"):
        load_class_split(root, "train")
    with pytest.raises(EmptySplitError, match="val: .*val is not a folder"):
        load_class_split(root, "val")


@pytest.mark.parametrize("mode", ["L", "LA", "RGBA", "P", "I;16"])
def test_grayscale_alpha_palette_and_16_bit_images_decode_to_8_bit_rgb(tmp_path: Path, mode: str) -> None:
    path = tmp_path / f"img-{mode.replace(';', '')}.png"
    if mode == "I;16":
        Image.fromarray(np.full((6, 8), 32896, dtype=np.uint16)).save(path)  # 32896 = 128 * 257
        expected = 128
    else:
        rgb = Image.new("RGB", (8, 6), (128, 128, 128))
        (rgb.convert(mode, palette=Image.Palette.ADAPTIVE) if mode == "P" else rgb.convert(mode)).save(path)
        expected = 128
    pixels = read_rgb8(path)
    assert pixels.dtype == np.uint8 and pixels.shape == (6, 8, 3)
    assert np.abs(pixels.astype(int) - expected).max() <= 1, (mode, pixels[0, 0])


def test_shapes_cls_crops_every_object_into_its_class_folder(tmp_path: Path) -> None:
    generate_shapes_cls(tmp_path, split_sizes={"train": 6, "val": 2})
    data = load_folder_data(tmp_path / "data.yaml")
    assert tuple(data.names.values()) == CLASS_NAMES
    train = load_class_split(data, "train")
    objects = sum(len(list((tmp_path / "train" / n).glob("*.jpg"))) for n in CLASS_NAMES)
    assert len(train) == objects > 0
    for path in train.images[:5]:
        with Image.open(path) as im:
            assert im.size[0] == im.size[1] >= 20  # square crops around each shape


def test_draws_are_a_function_of_seed_rank_epoch_and_index() -> None:
    aug = ClassifyAugment(randaugment=9)
    a = draw_crop(aug, index=3, hw=(60, 80), seed=1, rank=0, epoch=2)
    assert a == draw_crop(aug, index=3, hw=(60, 80), seed=1, rank=0, epoch=2)
    assert a != draw_crop(aug, index=3, hw=(60, 80), seed=1, rank=0, epoch=3)
    x0, y0, x1, y1 = a.box
    assert 0 <= x0 < x1 <= 80 and 0 <= y0 < y1 <= 60 and (x1 - x0) * (y1 - y0) >= 0.08 * 60 * 80 - 80
    off = ClassifyAugment.off()
    assert draw_crop(off, index=3, hw=(60, 80), seed=1, rank=0, epoch=2).box == (0.0, 0.0, 80.0, 60.0)
    wide = draw_crop(off, index=3, hw=(60, 100), seed=1, rank=0, epoch=2)
    assert wide.box == (10.0, 0.0, 90.0, 60.0)  # wider than 4/3: the central 4/3 crop


def _tiles(batch: int = 4, side: int = 48) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 256, (batch, side, side, 3), generator=g, dtype=torch.uint8)


def test_render_keeps_the_value_range_and_an_untouched_full_crop_is_the_resized_image() -> None:
    tiles = _tiles()
    boxes = torch.tensor([[0.0, 0.0, 48.0, 48.0]] * 4)
    none = torch.zeros(4, dtype=torch.bool)
    identity = torch.tensor([[1.0, 1.0, 1.0, 0.0]] * 4)
    ops, signs = torch.zeros(4, 2, dtype=torch.int64), torch.ones(4, 2)
    out = render_crops(tiles, boxes, none, identity, ops, signs, imgsz=48, magnitude=0)
    assert torch.allclose(out, tiles.permute(0, 3, 1, 2).float(), atol=1e-3)  # same size: the image itself
    flipped = render_crops(tiles, boxes, ~none, identity, ops, signs, imgsz=48, magnitude=0)
    assert torch.allclose(flipped, out.flip(-1))
    ops = torch.tensor([[8, 2], [7, 6], [1, 11], [0, 0]])  # rotate+brightness, solarize+posterize, ...
    augmented = render_crops(tiles, boxes, none, identity, ops, signs, imgsz=48, magnitude=15)
    assert augmented.min() >= 0 and augmented.max() <= 255
    assert torch.equal(augmented[3], out[3])  # identity ops leave a sample exactly alone
    assert all(not torch.allclose(augmented[i], out[i]) for i in range(3))


def test_mixup_and_cutmix_targets_are_distributions_matching_the_pixels() -> None:
    images = torch.stack([torch.zeros(3, 8, 8), torch.ones(3, 8, 8)])
    labels = torch.tensor([0, 2])
    rng = np.random.default_rng(0)
    mixed, targets = mix_batch(images, labels, 3, draw_mix(ClassifyAugment(mixup=0.8), rng, 8))
    lam = float(targets[0, 0])
    assert torch.allclose(targets.sum(1), torch.ones(2)) and targets[0, 2] == pytest.approx(1 - lam)
    assert torch.allclose(mixed[0], torch.full((3, 8, 8), 1 - lam))
    cut = draw_mix(ClassifyAugment(cutmix=1.0), rng, 8)
    mixed, targets = mix_batch(images, labels, 3, cut)
    assert float(mixed[0].mean()) == pytest.approx(float(targets[0, 2]))  # pasted share = partner's weight
    assert mix_batch(images, labels, 3, None)[1].tolist() == [[1, 0, 0], [0, 0, 1]]


def test_cpu_and_batched_paths_render_the_same_batches(tmp_path: Path) -> None:
    data = _folder_set(tmp_path / "d")
    split = load_class_split(data, "train")
    for randaugment in (0.0, 9.0):
        cpu, gpu = _both_paths(split, ClassifyAugment(randaugment=randaugment, hsv_h=0.1), tmp_path)
        for a, b in zip(cpu, gpu):
            assert a.paths == b.paths and torch.equal(a.targets, b.targets)
            assert torch.allclose(a.targets.sum(1), torch.ones(3)) and a.targets.min() == pytest.approx(0.05)
            close = (a.images - b.images).abs() <= 0.5 / 255 + 1e-6  # the CPU path rounds to uint8
            # Posterize and solarize are steps: a rounding difference across a step changes a
            # pixel by a whole step, so with RandAugment on a few pixels may differ more.
            share = float(close.float().mean())
            assert share == 1.0 if randaugment == 0 else share > 0.98, (randaugment, share, float((a.images - b.images).abs().max()) * 255)


def _both_paths(split, aug: ClassifyAugment, tmp_path: Path):  # noqa: ANN001, ANN202
    batches = {}
    for batched in (False, True):
        pipe = ClassifyTrainPipeline(split, imgsz=32, batch_size=3, device="cpu", augment=aug, workers=0, seed=5,
                                     gpu_augment=batched, cache="disk", cache_dir=tmp_path / "cache",
                                     label_smoothing=0.1)
        pipe.set_epoch(1)
        batches[batched] = list(pipe)
    return batches[False], batches[True]


def test_validation_feeds_exactly_the_pixels_predict_prepares(tmp_path: Path) -> None:
    root = tmp_path / "d"
    rng = np.random.default_rng(0)
    for i, (w, h) in enumerate(((90, 40), (33, 70))):
        path = root / "val" / "ant" / f"{i}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(path)
    (root / "train").symlink_to(root / "val")
    split = load_class_split(root, "val")
    batch = next(iter(ClassifyValPipeline(split, imgsz=32, batch_size=2, device="cpu", workers=0, cache="disk",
                                          cache_dir=tmp_path / "cache")))
    task = ClassifyTask()
    for image, path in zip(batch.images, batch.paths):
        assert torch.equal(image, task.prepare(read_rgb8(path), 32).tensor)
    crop = centre_crop(read_rgb8(split.images[0]), 32)
    assert crop.shape == (32, 32, 3) and crop.dtype == np.uint8
