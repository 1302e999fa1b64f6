"""TrainPipeline and ValPipeline: the batch contract, determinism, epochs, mosaic closing, workers."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from gloo_ranks import run_two_ranks
from PIL import Image

from libreyolo_models.data.augment_draws import draw_sample
from libreyolo_models.data.split_index import SplitIndex
from libreyolo_models.tasks.detect.pipeline import AugmentConfig, Batch, TrainPipeline, ValPipeline

IMGSZ = 32


@pytest.fixture(autouse=True)
def _private_cache_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "shm").mkdir()
    monkeypatch.setenv("LIBREYOLO_SHM_DIR", str(tmp_path / "shm"))
    monkeypatch.setenv("LIBREYOLO_CACHE_DIR", str(tmp_path / "cache"))


def make_split(folder: Path, n: int = 10, seed: int = 0) -> SplitIndex:
    """Small images of varied shape, each with one bright rectangle and its label."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths, labels, sizes = [], [], []
    for i in range(n):
        h, w = int(rng.integers(24, 64)), int(rng.integers(24, 64))
        pixels = rng.integers(0, 90, (h, w, 3), dtype=np.uint8)
        x1, y1 = int(rng.integers(0, w // 2)), int(rng.integers(0, h // 2))
        x2, y2 = int(rng.integers(x1 + w // 4, w + 1)), int(rng.integers(y1 + h // 4, h + 1))
        pixels[y1:y2, x1:x2] = (200, 160 + 10 * (i % 5), 60)
        path = folder / f"im{i:03d}.png"
        Image.fromarray(pixels).save(path)
        paths.append(path)
        sizes.append((h, w))
        labels.append(np.array([[i % 3, (x1 + x2) / 2 / w, (y1 + y2) / 2 / h, (x2 - x1) / w, (y2 - y1) / h]],
                               np.float32))
    return SplitIndex("train", paths, labels, sizes, {0: "a", 1: "b", 2: "c"})


def _train(index: SplitIndex, **kw: object) -> TrainPipeline:
    args: dict[str, object] = dict(imgsz=IMGSZ, batch_size=4, device="cpu", augment=AugmentConfig(degrees=10.0),
                                   workers=0, seed=0)
    args.update(kw)
    return TrainPipeline(index, **args)  # type: ignore[arg-type]


def _epoch(pipeline: TrainPipeline | ValPipeline) -> list[Batch]:
    return list(pipeline)


def _same(a: list[Batch], b: list[Batch]) -> bool:
    return len(a) == len(b) and all(
        torch.equal(x.images, y.images) and torch.equal(x.targets, y.targets) and x.paths == y.paths
        for x, y in zip(a, b))


@pytest.mark.parametrize("gpu_augment", [False, True])
def test_train_batches_meet_the_contract(tmp_path: Path, gpu_augment: bool) -> None:
    index = make_split(tmp_path / "img")
    pipeline = _train(index, gpu_augment=gpu_augment)
    assert pipeline.gpu_augment is gpu_augment
    pipeline.set_epoch(0, mosaic=True)
    batches = _epoch(pipeline)
    assert len(batches) == len(pipeline) == 2  # 10 images, batch 4: the partial batch is dropped
    for batch in batches:
        assert batch.images.shape == (4, 3, IMGSZ, IMGSZ) and batch.images.dtype == torch.float32
        assert 0.0 <= batch.images.min() and batch.images.max() <= 1.0
        assert batch.targets.dtype == torch.float32 and batch.targets.shape[1] == 6
        assert set(batch.targets[:, 0].long().tolist()) <= {0, 1, 2, 3}
        assert set(batch.targets[:, 1].long().tolist()) <= {0, 1, 2}
        assert (batch.targets[:, 2:] >= 0).all() and (batch.targets[:, 2:] <= 1).all()
        assert batch.ratio_pad is None and len(batch.paths) == len(batch.ori_sizes) == 4
        assert all(Path(p) in index.images for p in batch.paths)
    assert sum(len(b.targets) for b in batches) > 0


def test_same_seed_repeats_an_epoch_and_other_seeds_or_epochs_differ(tmp_path: Path) -> None:
    index = make_split(tmp_path / "img")
    first, again, other = _train(index), _train(index), _train(index, seed=1)
    for p in (first, again, other):
        p.set_epoch(3, mosaic=True)
    epoch3 = _epoch(first)
    assert _same(epoch3, _epoch(again))
    assert not _same(epoch3, _epoch(other))
    first.set_epoch(4, mosaic=True)
    assert not _same(epoch3, _epoch(first))
    first.set_epoch(3, mosaic=True)
    assert _same(epoch3, _epoch(first))


def test_draws_are_deterministic_and_differ_between_ranks() -> None:
    config = AugmentConfig(degrees=10.0, shear=3.0)
    kw = dict(index=5, n_images=100, imgsz=64, seed=7, epoch=2, mosaic=True)
    a, b = draw_sample(config, rank=0, **kw), draw_sample(config, rank=0, **kw)  # type: ignore[arg-type]
    other_rank = draw_sample(config, rank=1, **kw)  # type: ignore[arg-type]
    assert np.array_equal(a.matrix, b.matrix) and a.hsv == b.hsv and a.partners == b.partners
    assert not np.array_equal(a.matrix, other_rank.matrix) and a.hsv != other_rank.hsv


def test_closing_mosaic_keeps_each_samples_other_draws() -> None:
    config = AugmentConfig(mosaic=1.0)
    kw = dict(index=3, n_images=50, imgsz=64, seed=0, rank=0, epoch=9)
    open_, closed = draw_sample(config, mosaic=True, **kw), draw_sample(config, mosaic=False, **kw)  # type: ignore[arg-type]
    assert open_.is_mosaic and open_.canvas == 128
    assert not closed.is_mosaic and closed.canvas == 64 and closed.tile_indices == (3,)
    assert open_.hsv == closed.hsv and open_.flip == closed.flip and open_.scale == closed.scale


@pytest.mark.parametrize("gpu_augment", [False, True])
def test_without_augmentation_train_batches_are_the_letterboxed_val_images(tmp_path: Path,
                                                                           gpu_augment: bool) -> None:
    index = make_split(tmp_path / "img", n=8)
    train = _train(index, augment=AugmentConfig.off(), gpu_augment=gpu_augment)
    train.set_epoch(0, mosaic=True)  # mosaic open, but its probability is 0
    val = {p: (b.images[i], b.targets[b.targets[:, 0] == i, 1:])
           for b in ValPipeline(index, imgsz=IMGSZ, batch_size=3, device="cpu", workers=0)
           for i, p in enumerate(b.paths)}
    for batch in train:
        for i, path in enumerate(batch.paths):
            image, targets = val[path]
            assert torch.allclose(batch.images[i], image, atol=0.6 / 255)
            assert torch.allclose(batch.targets[batch.targets[:, 0] == i, 1:], targets, atol=1e-5)


@pytest.mark.parametrize("gpu_augment", [False, True])
def test_mosaic_only_while_open(tmp_path: Path, gpu_augment: bool) -> None:
    index = make_split(tmp_path / "img", n=8)
    only_mosaic = AugmentConfig(mosaic=1.0, translate=0.0, scale=0.0, hsv_h=0.0, hsv_s=0.0, hsv_v=0.0, fliplr=0.0)
    pipeline = _train(index, augment=only_mosaic, gpu_augment=gpu_augment)
    pipeline.set_epoch(0, mosaic=True)
    opened = _epoch(pipeline)
    pipeline.set_epoch(0, mosaic=False)
    closed = _epoch(pipeline)
    # closed: one label per image, letterboxed; open: four images meet, so objects of partners show up
    assert all(len(b.targets) == 4 for b in closed)
    assert sum(len(b.targets) for b in opened) > sum(len(b.targets) for b in closed)


def test_workers_give_the_same_batches_as_the_main_process_epoch_after_epoch(tmp_path: Path) -> None:
    index = make_split(tmp_path / "img", n=8)
    for gpu_augment in (True, False):
        main, pooled = _train(index, gpu_augment=gpu_augment), _train(index, gpu_augment=gpu_augment, workers=2)
        for epoch, mosaic in ((0, True), (1, False)):  # persistent workers must see set_epoch
            main.set_epoch(epoch, mosaic=mosaic)
            pooled.set_epoch(epoch, mosaic=mosaic)
            assert _same(_epoch(main), _epoch(pooled)), (gpu_augment, epoch)


def test_too_few_images_for_one_batch_names_the_fix(tmp_path: Path) -> None:
    index = make_split(tmp_path / "img", n=3)
    with pytest.raises(ValueError, match="lower batch to at most 3"):
        _train(index, batch_size=4)


def test_gpu_augment_auto_follows_the_device_and_bad_values_are_rejected(tmp_path: Path) -> None:
    index = make_split(tmp_path / "img", n=4)
    assert _train(index, gpu_augment="auto").gpu_augment is False
    with pytest.raises(ValueError, match="gpu_augment='yes'"):
        _train(index, gpu_augment="yes")


def test_augment_config_rejects_out_of_range_values_with_the_range() -> None:
    with pytest.raises(ValueError, match=r"fliplr=1.5 is outside \[0.0, 1.0\]"):
        AugmentConfig(fliplr=1.5)
    with pytest.raises(ValueError, match="degrees='x'"):
        AugmentConfig(degrees="x")  # type: ignore[arg-type]


def test_val_batches_are_letterboxed_in_order_and_map_back_to_the_original_boxes(tmp_path: Path) -> None:
    index = make_split(tmp_path / "img", n=7)
    val = ValPipeline(index, imgsz=IMGSZ, batch_size=3, device="cpu", workers=0)
    batches = _epoch(val)
    assert len(val) == 3 and [len(b.paths) for b in batches] == [3, 3, 1]  # nothing dropped
    assert [p for b in batches for p in b.paths] == [str(p) for p in index.images]
    assert _same(batches, _epoch(val))
    for b in batches:
        assert b.ratio_pad is not None and b.images.shape[1:] == (3, IMGSZ, IMGSZ)
        for i, (ratio, (pad_x, pad_y)) in enumerate(b.ratio_pad):
            h, w = b.ori_sizes[i]
            assert (h, w) == index.sizes[index.images.index(Path(b.paths[i]))]
            _, cx, cy, bw, bh = b.targets[b.targets[:, 0] == i, 1:][0].tolist()
            x1 = ((cx - bw / 2) * IMGSZ - pad_x) / ratio
            y2 = ((cy + bh / 2) * IMGSZ - pad_y) / ratio
            label = index.labels[index.images.index(Path(b.paths[i]))][0]
            assert x1 == pytest.approx((label[1] - label[3] / 2) * w, abs=1.0)
            assert y2 == pytest.approx((label[2] + label[4] / 2) * h, abs=1.0)
            # the letterbox bars are grey 114, the image between them is not
            if pad_x > 1:
                assert torch.allclose(b.images[i, :, :, : pad_x], torch.full((3, IMGSZ, pad_x), 114 / 255))
            if pad_y > 1:
                assert torch.allclose(b.images[i, :, : pad_y], torch.full((3, pad_y, IMGSZ), 114 / 255))


_RANK_SCRIPT = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import numpy as np
    import torch.distributed as dist
    from libreyolo_models.data import image_cache
    from libreyolo_models.tasks.detect.pipeline import AugmentConfig, TrainPipeline
    from libreyolo_models.data.split_index import SplitIndex

    rank, world, init_file, folder, out = int(sys.argv[1]), 2, sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    decoded = []
    real = image_cache.decode_image
    image_cache.decode_image = lambda path, size: (decoded.append(str(path)), real(path, size))[1]
    paths = sorted(folder.glob("*.png"))
    index = SplitIndex("train", paths, [np.array([[0, 0.5, 0.5, 0.5, 0.5]], np.float32)] * len(paths),
                       [(40, 30)] * len(paths), {0: "a"})
    pipeline = TrainPipeline(index, imgsz=16, batch_size=2, device="cpu", augment=AugmentConfig(),
                             workers=0, seed=0)
    pipeline.set_epoch(0, mosaic=True)
    seen = [p for batch in pipeline for p in batch.paths]
    out.joinpath(f"rank{rank}.json").write_text(json.dumps(
        {"decoded": len(decoded), "seen": seen, "cache": str(pipeline.cache.path), "steps": len(pipeline)}))
    dist.barrier()
    dist.destroy_process_group()
""")


@pytest.mark.slow
# Passes alone (`pytest -n 2 -m solo`, and the whole file with -n 2), but in the full `pytest -n 2`
# run of a fresh clone the xdist worker running it died twice ("node down: Not properly
# terminated", nothing on stderr, so no Python fault); the cause is not found yet, so CI's default
# selection leaves it out. Excluded (2026-12-01): state left by any test a worker can have run
# before it (collection order: cudagraph, ddp, then models tests up to this file). It passed after
# them in one process (-p no:xdist: cudagraph + ddp + this file, 273 tests; models tests before this
# file, 497) and after all of them under -n 2 (its worker: RSS 1.5 GB, 20 GB memory available, no
# pending itimer, torch's DataLoader SIGCHLD handler installed).
@pytest.mark.solo
def test_ddp_ranks_build_the_cache_once_and_train_on_disjoint_shards(tmp_path: Path) -> None:
    folder = tmp_path / "img"
    folder.mkdir()
    for i in range(8):
        Image.fromarray(np.full((40, 30, 3), 20 * i, np.uint8)).save(folder / f"{i}.png")
    zero, one = run_two_ranks(_RANK_SCRIPT, folder, tmp_path)
    assert zero["decoded"] == 8 and one["decoded"] == 0  # rank 0 built, rank 1 opened its file
    assert zero["cache"] == one["cache"]
    assert zero["steps"] == one["steps"] == 2
    assert len(zero["seen"]) == len(one["seen"]) == 4 and not set(zero["seen"]) & set(one["seen"])
