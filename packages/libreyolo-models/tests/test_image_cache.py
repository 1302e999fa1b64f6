"""The decode-once image cache: content, placement, reuse, invalidation, locking, failures."""

from __future__ import annotations

import logging
import os
import pickle
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from libreyolo_models.data import image_cache
from libreyolo_models.data.image_cache import ImageCache, ImageCacheError, decode_image, open_image_cache


@pytest.fixture(autouse=True)
def _private_cache_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "shm").mkdir()
    monkeypatch.setenv("LIBREYOLO_SHM_DIR", str(tmp_path / "shm"))
    monkeypatch.setenv("LIBREYOLO_CACHE_DIR", str(tmp_path / "cache"))


def _write_images(folder: Path, sizes: list[tuple[int, int]], suffix: str = ".png") -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    paths = []
    for i, (h, w) in enumerate(sizes):
        path = folder / f"img{i}{suffix}"
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(path)
        paths.append(path)
    return paths


def test_cache_holds_each_image_resized_to_long_side_imgsz(tmp_path: Path) -> None:
    paths = _write_images(tmp_path / "img", [(30, 60), (64, 16), (20, 20)])
    cache = open_image_cache(paths, 32)
    assert len(cache) == 3 and cache.imgsz == 32
    assert cache.hw.tolist() == [[16, 32], [32, 8], [32, 32]]
    assert cache.ori_hw.tolist() == [[30, 60], [64, 16], [20, 20]]
    for i, path in enumerate(paths):
        expected = np.asarray(Image.open(path).convert("RGB").resize(tuple(cache.hw[i][::-1]),
                                                                      Image.Resampling.BILINEAR))
        assert np.array_equal(cache.read(i), expected)
    slot = np.full((32, 32, 3), 7, np.uint8)
    cache.read_into(0, slot)
    assert np.array_equal(slot[:16, :32], cache.read(0)) and (slot[16:] == 7).all()  # rows below h untouched


def test_exif_orientation_is_applied_before_resizing(tmp_path: Path) -> None:
    pixels = np.zeros((80, 160, 3), np.uint8)
    pixels[:, :40] = 255  # a white band on the left of the stored image
    path = tmp_path / "rotated.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6  # displayed rotated 90 degrees clockwise: the band ends up on top
    Image.fromarray(pixels).save(path, exif=exif, quality=95)
    image, ori_hw = decode_image(path, 40)  # a quarter of the size: the JPEG is decoded reduced
    assert ori_hw == (160, 80) and image.shape == (40, 20, 3)
    assert image[:8].mean() > 200 and image[12:].mean() < 50


def test_reduced_jpeg_decoding_stays_close_to_a_full_decode(tmp_path: Path) -> None:
    yy, xx = np.mgrid[0:300, 0:400]
    pixels = np.stack((xx * 255 // 400, yy * 255 // 300, (xx + yy) % 256), -1).astype(np.uint8)
    path = tmp_path / "large.jpg"
    Image.fromarray(pixels).save(path, quality=95)
    image, _ = decode_image(path, 64)
    full = np.asarray(Image.open(path).convert("RGB").resize((64, 48), Image.Resampling.BILINEAR))
    assert image.shape == (48, 64, 3)
    assert np.abs(image.astype(int) - full.astype(int)).mean() < 4.0


def test_ram_mode_uses_the_shm_dir_and_disk_mode_the_cache_dir(tmp_path: Path) -> None:
    paths = _write_images(tmp_path / "img", [(16, 16)] * 2)
    ram = open_image_cache(paths, 16, mode="ram")
    disk = open_image_cache(paths, 16, mode="disk", cache_dir=tmp_path / "mine")
    assert ram.path.parent.parent == tmp_path / "shm"
    assert disk.path.parent == tmp_path / "mine"
    assert np.array_equal(ram.read(1), disk.read(1))
    auto = open_image_cache(paths, 16, mode="auto")  # finds the RAM copy instead of building
    assert auto.path == ram.path


def test_ram_mode_without_a_shm_dir_warns_and_caches_on_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("LIBREYOLO_SHM_DIR", str(tmp_path / "no-such-dir"))
    paths = _write_images(tmp_path / "img", [(16, 16)])
    with caplog.at_level(logging.WARNING):
        cache = open_image_cache(paths, 16, mode="ram")
    assert cache.path.is_relative_to(tmp_path / "cache")
    assert "caching on disk" in caplog.text


def test_second_open_reuses_the_file_without_decoding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = _write_images(tmp_path / "img", [(16, 24)] * 3)
    first = open_image_cache(paths, 16)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("decoded again")

    monkeypatch.setattr(image_cache, "decode_image", refuse)
    second = open_image_cache(paths, 16)
    assert second.path == first.path and np.array_equal(second.read(2), first.read(2))
    assert sorted(p.name for p in first.path.parent.iterdir()) == sorted([first.path.name, first.path.name + ".lock"])


def test_changed_image_or_imgsz_gets_a_new_cache_file(tmp_path: Path) -> None:
    paths = _write_images(tmp_path / "img", [(16, 16)] * 2)
    first = open_image_cache(paths, 16)
    assert open_image_cache(paths, 8).path != first.path
    Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(paths[1])
    stamp = time.time() + 5
    os.utime(paths[1], (stamp, stamp))
    rebuilt = open_image_cache(paths, 16)
    assert rebuilt.path != first.path and rebuilt.read(1).max() == 0


def test_concurrent_openers_decode_each_image_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = _write_images(tmp_path / "img", [(16, 16)] * 4)
    calls: list[Path] = []
    real = image_cache.decode_image

    def slow_decode(path: Path, imgsz: int) -> tuple[np.ndarray, tuple[int, int]]:
        calls.append(path)
        time.sleep(0.05)
        return real(path, imgsz)

    monkeypatch.setattr(image_cache, "decode_image", slow_decode)
    results: list[ImageCache] = []
    threads = [threading.Thread(target=lambda: results.append(open_image_cache(paths, 16))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3 and len({r.path for r in results}) == 1
    assert sorted(calls) == sorted(paths)


def test_undecodable_image_is_recorded_in_the_cache_not_raised(tmp_path: Path) -> None:
    paths = _write_images(tmp_path / "img", [(16, 16)] * 2)
    broken = tmp_path / "img" / "broken.jpg"
    broken.write_bytes(b"\xff\xd8 not really a jpeg")
    cache = open_image_cache([*paths, broken], 16)
    assert list(cache.failed) == [2] and "not an image PIL can identify" in cache.failed[2]
    assert cache.hw[2].tolist() == [0, 0] and cache.read(1).shape == (16, 16, 3)
    reopened = open_image_cache([*paths, broken], 16)  # the verdict travels with the file
    assert reopened.path == cache.path and reopened.failed == cache.failed


def test_missing_image_is_reported_before_any_work(tmp_path: Path) -> None:
    with pytest.raises(ImageCacheError, match="gone.png"):
        open_image_cache([tmp_path / "gone.png"], 16)


def test_truncated_cache_file_is_rebuilt(tmp_path: Path) -> None:
    paths = _write_images(tmp_path / "img", [(16, 16)] * 2)
    first = open_image_cache(paths, 16)
    expected = first.read(1)
    with open(first.path, "r+b") as f:
        f.truncate(100)
    again = open_image_cache(paths, 16)
    assert again.path == first.path and np.array_equal(again.read(1), expected)


def test_pickled_cache_carries_no_memory_map_and_reads_after_unpickling(tmp_path: Path) -> None:
    paths = _write_images(tmp_path / "img", [(16, 16)] * 2)
    cache = open_image_cache(paths, 16)
    cache.read(0)  # maps the file in this process
    blob = pickle.dumps(cache)
    assert len(blob) < 4096  # metadata only, not the pixels
    clone = pickle.loads(blob)
    assert np.array_equal(clone.read(1), cache.read(1))


def test_bad_mode_and_imgsz_are_rejected_with_the_value(tmp_path: Path) -> None:
    paths = _write_images(tmp_path / "img", [(16, 16)])
    with pytest.raises(ValueError, match="cache='memory'"):
        open_image_cache(paths, 16, mode="memory")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="imgsz=0"):
        open_image_cache(paths, 0)
