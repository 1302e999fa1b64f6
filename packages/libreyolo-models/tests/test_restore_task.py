"""The restore task: paired readers with broken data, aligned crops, PSNR / SSIM against
scikit-image, the bundled shapes-restore set, validation batches and ``Results.image``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from libreyolo_models.data.errors import DataConfigError, EmptySplitError
from libreyolo_models.tasks import get_task
from libreyolo_models.tasks.restore.image import RestoredImage
from libreyolo_models.tasks.restore.metrics import RestoreMetrics, psnr, ssim, to_pixels
from libreyolo_models.tasks.restore.pipeline import PairValPipeline, crop_pair
from libreyolo_models.tasks.restore.reader import load_paired_data, read_pair_split
from libreyolo_models.tasks.restore.shapes_restore import degrade, generate_shapes_restore
from libreyolo_models.tasks.results import Results


def _write(path: Path, h: int, w: int, seed: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)).save(path)


@pytest.fixture
def paired(tmp_path: Path) -> Path:
    root = tmp_path / "pairs"
    for name in ("a", "b", "c"):
        _write(root / "train" / "input" / f"{name}.png", 20, 30)
        _write(root / "train" / "target" / f"{name}.png", 20, 30, seed=1)
    _write(root / "train" / "input" / "lonely.png", 20, 30)                  # no target
    _write(root / "train" / "target" / "orphan.png", 20, 30)                 # no input
    _write(root / "train" / "input" / "big.png", 20, 30)
    _write(root / "train" / "target" / "big.jpg", 24, 30)                    # another size (suffix may differ)
    (root / "train" / "input" / "broken.png").write_bytes(b"not a png")
    _write(root / "train" / "target" / "broken.png", 20, 30)
    (root / "data.yaml").write_text("train: train\nval:\n  input: train/input\n  target: train/target\n")
    return root / "data.yaml"


def test_reader_pairs_by_name_and_reports_every_broken_pair(paired: Path, caplog: pytest.LogCaptureFixture) -> None:
    data = load_paired_data(paired)
    assert set(data.splits) == {"train", "val"} and data.nc == 1
    split = read_pair_split(data, "train")
    assert [p.name for p in split.inputs] == ["a.png", "b.png", "c.png"]
    assert split.sizes == [(20, 30)] * 3
    reasons = " | ".join(p.reason for p in split.problems)
    assert "no target" in reasons and "without an input" in reasons and "its target" in reasons
    assert "30x20 (w x h) but its target" in reasons and "30x24" in reasons
    assert "lonely.png" in caplog.text and "orphan.png" in caplog.text


def test_reader_errors_name_the_fix(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("val: val\n")
    with pytest.raises(DataConfigError, match="no 'train' split"):
        load_paired_data(tmp_path / "bad.yaml")
    (tmp_path / "bad.yaml").write_text("train: {input: x}\n")
    with pytest.raises(DataConfigError, match="exactly the keys input and target"):
        load_paired_data(tmp_path / "bad.yaml")
    (tmp_path / "ok.yaml").write_text("train: nowhere\n")
    with pytest.raises(EmptySplitError, match="input folder .* does not exist"):
        read_pair_split(load_paired_data(tmp_path / "ok.yaml"), "train")
    with pytest.raises(DataConfigError, match="no 'val' split"):
        read_pair_split(load_paired_data(tmp_path / "ok.yaml"), "val")


def test_crops_take_the_same_window_of_both_images_and_flip_both() -> None:
    given = torch.arange(3 * 10 * 12, dtype=torch.uint8).view(3, 10, 12)
    clean = given + 1
    a, b = crop_pair(given, clean, 6, 0.5, 0.99, flip=False)
    assert torch.equal(b, a + 1) and a.shape == (3, 6, 6) and torch.equal(a, given[:, 2:8, 6:12])
    fa, fb = crop_pair(given, clean, 6, 0.5, 0.99, flip=True)
    assert torch.equal(fa, a.flip(-1)) and torch.equal(fb, b.flip(-1))
    small_a, small_b = crop_pair(given[:, :4], clean[:, :4], 6, 0.0, 0.0, flip=False)  # padded first
    assert small_a.shape == (3, 6, 6) and torch.equal(small_b, small_a + 1)


def test_psnr_and_ssim_on_hand_made_cases() -> None:
    clean = torch.full((3, 16, 16), 100.0)
    noisy = clean.clone()
    noisy[0, 0, 0] += 16.0                                  # one pixel off by 16: mse = 256 / 768
    assert psnr(noisy, clean) == pytest.approx(10 * np.log10(255.0**2 / (256 / 768)), abs=1e-9)
    assert psnr(clean, clean) == float("inf")
    assert ssim(clean, clean) == pytest.approx(1.0, abs=1e-12)
    assert ssim(torch.zeros(3, 16, 16), torch.full((3, 16, 16), 255.0)) == pytest.approx(
        (0.01 * 255) ** 2 / (255.0**2 + (0.01 * 255) ** 2), abs=1e-12)  # flat images: the luminance term only
    with pytest.raises(Exception, match="at least 11 pixels"):
        ssim(torch.zeros(3, 8, 20), torch.zeros(3, 8, 20))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_psnr_and_ssim_equal_scikit_image(seed: int) -> None:
    metrics = pytest.importorskip("skimage.metrics", reason="scikit-image is the reference (not installed)")
    rng = np.random.default_rng(seed)
    h, w = (int(v) for v in rng.integers(11, 64, 2))
    clean = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    noisy = np.clip(clean + rng.normal(0, 5 + 20 * seed, clean.shape), 0, 255).astype(np.uint8)
    ours_p = psnr(torch.from_numpy(noisy).permute(2, 0, 1), torch.from_numpy(clean).permute(2, 0, 1))
    ours_s = ssim(torch.from_numpy(noisy).permute(2, 0, 1), torch.from_numpy(clean).permute(2, 0, 1))
    ref_p = metrics.peak_signal_noise_ratio(clean, noisy, data_range=255)
    ref_s = metrics.structural_similarity(clean, noisy, data_range=255, channel_axis=-1, gaussian_weights=True,
                                          sigma=1.5, use_sample_covariance=False)
    assert ours_p == pytest.approx(ref_p, abs=1e-6)
    assert ours_s == pytest.approx(ref_s, abs=1e-4)


def test_metrics_round_to_8_bits_and_average_per_image() -> None:
    clean = torch.rand(3, 20, 20)
    metrics = RestoreMetrics()
    metrics.update(clean + 0.001, clean, (clean + 0.2).clamp(0, 1))   # restored within rounding of the target
    result = metrics.result()
    assert result.n_images == 1 and result.psnr > result.psnr_input and result.psnr_gain > 0
    assert torch.equal(to_pixels(torch.tensor([[[1.2, -0.1, 0.5]]])), torch.tensor([[[255.0, 0.0, 128.0]]],
                                                                                    dtype=torch.float64))
    assert set(result.as_dict()) == {"metrics/PSNR", "metrics/SSIM", "metrics/PSNR_input", "metrics/SSIM_input"}
    assert "PSNR" in result.table() and result.fitness == result.psnr


def test_shapes_restore_is_deterministic_and_degrades_three_ways(tmp_path: Path) -> None:
    generate_shapes_restore(tmp_path / "a", split_sizes={"train": 3, "val": 1})
    generate_shapes_restore(tmp_path / "b", split_sizes={"train": 3, "val": 1})
    files = sorted((tmp_path / "a").rglob("*.png"))
    assert len(files) == 8 and all(f.read_bytes() == (tmp_path / "b" / f.relative_to(tmp_path / "a")).read_bytes()
                                   for f in files)
    split = read_pair_split(load_paired_data(tmp_path / "a" / "data.yaml"), "train")
    gains = []
    for given, clean in zip(split.inputs, split.targets):
        a, b = np.asarray(Image.open(given), np.float64), np.asarray(Image.open(clean), np.float64)
        gains.append(10 * np.log10(255**2 / ((a - b) ** 2).mean()))
    assert all(20 < g < 40 for g in gains), gains  # degraded, not destroyed
    flat = np.full((16, 16, 3), 128, np.uint8)
    assert (degrade(flat, 1, np.random.default_rng(0)) == flat).all()  # a blur leaves a flat picture flat
    assert (degrade(flat, 0, np.random.default_rng(0)) != flat).any()  # noise does not


def test_validation_batches_group_pictures_of_one_size(tmp_path: Path) -> None:
    root = tmp_path / "v"
    for i, (h, w) in enumerate([(20, 30), (24, 24), (20, 30), (20, 30)]):
        _write(root / "val" / "input" / f"{i}.png", h, w)
        _write(root / "val" / "target" / f"{i}.png", h, w, seed=1)
    (root / "data.yaml").write_text("train: val\nval: val\n")
    split = read_pair_split(load_paired_data(root / "data.yaml"), "val")
    batches = list(PairValPipeline(split, batch_size=2, device="cpu", workers=0))
    assert sorted(tuple(b.images.shape) for b in batches) == [(1, 3, 20, 30), (1, 3, 24, 24), (2, 3, 20, 30)]
    assert sum(len(b.paths) for b in batches) == 4 and all(b.images.max() <= 1 for b in batches)


def test_restored_image_content_through_results(tmp_path: Path) -> None:
    picture = np.zeros((4, 6, 3), np.uint8)
    data = torch.rand(3, 4, 6)
    result = Results(picture, "x.png", {0: "image"}, contents={"image": RestoredImage(data)})
    assert result.image.shape == (4, 6) and len(result) == 1 and result.boxes is None and result.points is None
    assert result.summary() == "restored 6x4" and json.loads(result.to_json()) == [{"height": 4, "width": 6}]
    assert result.to_csv() == "height,width\n4,6\n"
    assert (result.plot() == (data.clamp(0, 1) * 255).round().byte().permute(1, 2, 0).numpy()).all()
    saved = result.save(tmp_path / "out.png")
    assert (np.asarray(Image.open(saved)) == result.plot()).all()
    assert isinstance(result.numpy().image.data, np.ndarray) and result.to("cpu").image.data.device.type == "cpu"


def test_predict_preprocessing_keeps_pictures_whole_and_pads_a_mixed_batch() -> None:
    task = get_task("restore")
    pics = [torch.full((5, 7, 3), 10, dtype=torch.uint8), torch.full((6, 4, 3), 20, dtype=torch.uint8)]
    batch, infos = task.prepare_batch(pics, 64, torch.float32, torch.device("cpu"))
    assert batch.shape == (2, 3, 6, 7) and infos == [(5, 7), (6, 4)]
    assert batch[0, :, 5:].eq(0).all() and batch[1, :, :, 4:].eq(0).all() and batch[0, :, :5, :7].eq(10).all()
    assert task.prepare(np.zeros((5, 7, 3), np.uint8), 64).tensor.shape == (3, 5, 7)
    with pytest.raises(Exception, match="nothing to filter"):
        task.postprocess_options({"classes": [0]})


def test_training_crops_follow_seed_and_epoch_only(paired: Path) -> None:
    from libreyolo_models.errors import ConfigError
    from libreyolo_models.tasks.restore.pipeline import PairTrainPipeline

    split = read_pair_split(load_paired_data(paired), "train")

    def first_epoch(epoch: int, seed: int = 0) -> list[torch.Tensor]:
        pipeline = PairTrainPipeline(split, imgsz=8, batch_size=3, device="cpu", fliplr=0.5, workers=0, seed=seed)
        pipeline.set_epoch(epoch)
        return [b.images for b in pipeline]

    assert all(torch.equal(a, b) for a, b in zip(first_epoch(0), first_epoch(0), strict=True))
    assert not torch.equal(first_epoch(0)[0], first_epoch(1)[0])
    with pytest.raises(ConfigError, match="fewer than one batch of 4 .* lower batch to at most 3"):
        PairTrainPipeline(split, imgsz=8, batch_size=4, device="cpu", fliplr=0.5, workers=0, seed=0)
    with pytest.raises(ConfigError, match="seed=-1"):
        PairTrainPipeline(split, imgsz=8, batch_size=3, device="cpu", fliplr=0.5, workers=0, seed=-1)


def test_fraction_keeps_the_pairs_together(paired: Path) -> None:
    from libreyolo_models.train.fit_options import OptionedTask

    task = OptionedTask(get_task("restore"), fraction=0.5, seed=0)
    data = task.load_data(paired)
    half = task.load_split(data, "train")
    assert len(half) == len(half.targets) == len(half.sizes) == 2          # 2 of the 3 usable pairs
    assert all(i.name == t.name for i, t in zip(half.inputs, half.targets, strict=True))
