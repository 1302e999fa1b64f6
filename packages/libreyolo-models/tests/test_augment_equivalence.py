"""For the same draws, the batched path and the per-sample path give the same images and boxes.

The per-sample path is what CPU training runs in DataLoader workers (one sample at a time, rounded
to uint8); the batched path is what GPU training runs on the whole batch on the device. Here the
batched path runs on the CPU; the ``cuda`` tests run it on a GPU against the CPU reference.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from libreyolo_models.data.augment_draws import AugmentConfig, SampleDraws, draw_sample
from libreyolo_models.data.collate import collate_tiles
from libreyolo_models.data.image_cache import ImageCache, open_image_cache
from libreyolo_models.data.split_index import SplitIndex
from libreyolo_models.tasks.detect.pipeline import Batch, TrainPipeline

IMGSZ = 48
STRONG = AugmentConfig(mosaic=0.6, degrees=20.0, translate=0.2, scale=0.5, shear=6.0,
                       hsv_h=0.05, hsv_s=0.7, hsv_v=0.4, fliplr=0.5)


@pytest.fixture(autouse=True)
def _private_cache_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "shm").mkdir()
    monkeypatch.setenv("LIBREYOLO_SHM_DIR", str(tmp_path / "shm"))
    monkeypatch.setenv("LIBREYOLO_CACHE_DIR", str(tmp_path / "cache"))


def textured_split(folder: Path, n: int = 12) -> SplitIndex:
    """Gradient-and-noise images with two or three coloured boxes each (sharp edges stress the warp)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(42)
    paths, labels, sizes = [], [], []
    for i in range(n):
        h, w = int(rng.integers(30, 90)), int(rng.integers(30, 90))
        yy, xx = np.mgrid[0:h, 0:w]
        base = np.stack(((xx * 255 // w), (yy * 255 // h), ((xx + yy) * 3) % 256), -1).astype(np.int32)
        pixels = np.clip(base + rng.integers(-20, 21, (h, w, 3)), 0, 255).astype(np.uint8)
        rows = []
        for k in range(int(rng.integers(2, 4))):
            bw, bh = int(rng.integers(w // 6, w // 2)), int(rng.integers(h // 6, h // 2))
            x1, y1 = int(rng.integers(0, w - bw)), int(rng.integers(0, h - bh))
            pixels[y1:y1 + bh, x1:x1 + bw] = rng.integers(0, 256, 3)
            rows.append([k, (x1 + bw / 2) / w, (y1 + bh / 2) / h, bw / w, bh / h])
        path = folder / f"t{i:02d}.jpg" if i % 2 else folder / f"t{i:02d}.png"
        Image.fromarray(pixels).save(path)
        paths.append(path)
        sizes.append((h, w))
        labels.append(np.array(rows, np.float32))
    return SplitIndex("train", paths, labels, sizes, {0: "a", 1: "b", 2: "c"})


def _draws(index: SplitIndex, *, epoch: int, count: int) -> list[SampleDraws]:
    return [draw_sample(STRONG, index=i % len(index), n_images=len(index), imgsz=IMGSZ, seed=3, rank=0,
                        epoch=epoch, mosaic=True) for i in range(count)]


def _per_sample(cache: ImageCache, index: SplitIndex, draws: list[SampleDraws]) -> tuple[torch.Tensor, torch.Tensor]:
    """The CPU training path: one sample at a time, rounded to uint8 like a worker ships it."""
    images, targets = [], []
    for position, d in enumerate(draws):
        one = collate_tiles(cache, index.labels, [d], index.images)
        images.append(one.render(IMGSZ)[0].round().clamp(0, 255).to(torch.uint8))
        rows = one.targets.clone()
        rows[:, 0] = position
        targets.append(rows)
    return torch.stack(images), torch.cat(targets)


def assert_images_match(batched: torch.Tensor, reference_u8: torch.Tensor, *, strict: bool) -> None:
    """``batched`` float in [0, 255]; the reference is the per-sample path's uint8."""
    diff = (batched.float().cpu() - reference_u8.float()).abs()
    if strict:  # same device, same arithmetic: only the reference's rounding differs
        assert diff.max().item() <= 0.5 + 1e-2
        return
    assert (diff > 2.0).float().mean().item() <= 1e-3, f"{(diff > 2.0).sum().item()} pixels differ by > 2/255"
    assert diff.mean().item() <= 0.4
    assert diff.max().item() <= 8.0


def assert_targets_match(batched: torch.Tensor, reference: torch.Tensor) -> None:
    batched = batched.cpu()
    assert batched.shape == reference.shape
    assert torch.equal(batched[:, :2], reference[:, :2])               # same boxes kept, same classes
    assert (batched[:, 2:] - reference[:, 2:]).abs().max().item() * IMGSZ <= 1e-4  # pixels


def _batches_match(batched: list[Batch], reference: list[Batch], *, strict: bool) -> None:
    assert len(batched) == len(reference) > 0
    for got, want in zip(batched, reference):
        assert got.paths == want.paths
        assert_images_match(got.images * 255, (want.images.cpu() * 255).round().to(torch.uint8), strict=strict)
        assert_targets_match(got.targets, want.targets.cpu())


def test_batched_path_matches_the_per_sample_path_on_cpu(tmp_path: Path) -> None:
    index = textured_split(tmp_path / "img")
    cache = open_image_cache(index.images, IMGSZ)
    for epoch in range(3):
        draws = _draws(index, epoch=epoch, count=10)
        assert {d.is_mosaic for d in draws} == {True, False}  # both canvas kinds in one batch
        batch = collate_tiles(cache, index.labels, draws, index.images)
        reference_images, reference_targets = _per_sample(cache, index, draws)
        assert_images_match(batch.render(IMGSZ), reference_images, strict=True)
        assert_targets_match(batch.targets, reference_targets)
        assert len(reference_targets) > 0


def test_pipeline_paths_give_the_same_batches_on_cpu(tmp_path: Path) -> None:
    index = textured_split(tmp_path / "img")
    runs = {}
    for gpu_augment in (False, True):
        pipeline = TrainPipeline(index, imgsz=IMGSZ, batch_size=4, device="cpu", augment=STRONG, workers=0,
                                 seed=5, gpu_augment=gpu_augment)
        pipeline.set_epoch(1, mosaic=True)
        runs[gpu_augment] = list(pipeline)
    _batches_match(runs[True], runs[False], strict=True)


@pytest.mark.cuda
def test_cuda_batched_path_matches_the_cpu_per_sample_path(tmp_path: Path) -> None:
    index = textured_split(tmp_path / "img", n=16)
    cache = open_image_cache(index.images, IMGSZ)
    device = torch.device("cuda")
    for epoch in range(3):
        draws = _draws(index, epoch=epoch, count=16)
        batch = collate_tiles(cache, index.labels, draws, index.images).pin_memory().to(device, non_blocking=True)
        rendered = batch.render(IMGSZ)
        assert rendered.device.type == "cuda"
        reference_images, reference_targets = _per_sample(cache, index, draws)
        assert_images_match(rendered, reference_images, strict=False)
        assert_targets_match(batch.targets, reference_targets)


@pytest.mark.cuda
def test_cuda_pipeline_matches_the_cpu_pipeline_epoch_after_epoch(tmp_path: Path) -> None:
    index = textured_split(tmp_path / "img", n=16)
    gpu = TrainPipeline(index, imgsz=IMGSZ, batch_size=4, device="cuda", augment=STRONG, workers=0, seed=5)
    cpu = TrainPipeline(index, imgsz=IMGSZ, batch_size=4, device="cpu", augment=STRONG, workers=0, seed=5)
    assert gpu.gpu_augment is True and cpu.gpu_augment is False
    for epoch, mosaic in ((0, True), (1, True), (2, False)):
        gpu.set_epoch(epoch, mosaic=mosaic)
        cpu.set_epoch(epoch, mosaic=mosaic)
        # consume like a trainer: work on the default stream right after each batch arrives
        got = []
        for batch in gpu:
            assert batch.images.is_cuda and not batch.targets.is_cuda  # targets stay on the host for the loss
            assert batch.images.dtype == torch.float32
            batch.images.mul_(1.0)  # touch the images on the consumer's stream
            got.append(batch)
        torch.cuda.synchronize()
        _batches_match(got, list(cpu), strict=False)
