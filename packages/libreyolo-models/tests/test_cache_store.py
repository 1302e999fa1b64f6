"""Image caches have a lifecycle: a place the user picks, a memory check, replacement, eviction,
removal of orphans and of dead runs' private files, protection of caches in use, and a clean-up."""

from __future__ import annotations

import gc
import logging
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from libreyolo_models.atomic_write import owner_tag
from libreyolo_models.data import cache_store
from libreyolo_models.data.cache_store import (
    CachePlace,
    clean_image_caches,
    list_cache_files,
    parse_cache_setting,
)
from libreyolo_models.data.image_cache import open_image_cache
from libreyolo_models.errors import ConfigError


@pytest.fixture(autouse=True)
def _private_cache_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "shm").mkdir()
    monkeypatch.setenv("LIBREYOLO_SHM_DIR", str(tmp_path / "shm"))
    monkeypatch.setenv("LIBREYOLO_CACHE_DIR", str(tmp_path / "cache"))


def _images(folder: Path, n: int = 2, seed: int = 0) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(n):
        path = folder / f"img{i}.png"
        Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(path)
        paths.append(path)
    return paths


def _ram(tmp_path: Path) -> Path:
    return tmp_path / "shm" / f"libreyolo-{os.getuid()}"


@pytest.mark.parametrize(("value", "expected"), [
    ("auto", CachePlace("auto")), ("RAM", CachePlace("ram")), ("disk", CachePlace("disk")), ("off", CachePlace("off")),
    ("GPU", CachePlace("gpu")), (True, CachePlace("ram")), (False, CachePlace("off")), ("false", CachePlace("off")),
    ("./my-cache", CachePlace("disk", Path("my-cache"))), ("/scratch/c", CachePlace("disk", Path("/scratch/c"))),
])
def test_cache_settings_parse(value: object, expected: CachePlace) -> None:
    assert parse_cache_setting(value) == expected  # type: ignore[arg-type]


def test_a_folder_setting_puts_the_cache_there(tmp_path: Path) -> None:
    cache = open_image_cache(_images(tmp_path / "img"), 16, mode=str(tmp_path / "fast-disk"))
    assert cache.path.parent == tmp_path / "fast-disk"


def test_a_rebuilt_split_replaces_its_old_cache(tmp_path: Path) -> None:
    paths = _images(tmp_path / "img")
    first = open_image_cache(paths, 16, mode="ram")
    old = first.path
    del first
    gc.collect()  # the run that used it is over: no process holds the file
    Image.new("RGB", (16, 16)).save(paths[1])
    os.utime(paths[1], (1e9, 1e9))
    second = open_image_cache(paths, 16, mode="ram")
    assert second.path != old and not old.exists()
    assert [e.path for e in list_cache_files(_ram(tmp_path))] == [second.path]


def test_a_cache_in_use_is_never_removed(tmp_path: Path) -> None:
    paths = _images(tmp_path / "img")
    first = open_image_cache(paths, 16, mode="ram")  # still referenced: "a run is using it"
    Image.new("RGB", (16, 16)).save(paths[1])
    os.utime(paths[1], (1e9, 1e9))
    second = open_image_cache(paths, 16, mode="ram")
    assert first.path.exists() and second.path.exists()
    removed, kept = clean_image_caches()
    assert removed == [] and sorted(e.path for e in kept) == sorted([first.path, second.path])
    np.testing.assert_array_equal(first.read(0), np.asarray(Image.open(paths[0])))


def test_caches_of_deleted_datasets_are_removed_at_the_next_build(tmp_path: Path) -> None:
    gone = open_image_cache(_images(tmp_path / "gone"), 16, mode="ram").path
    gc.collect()
    for p in (tmp_path / "gone").iterdir():
        p.unlink()
    (tmp_path / "gone").rmdir()
    other = open_image_cache(_images(tmp_path / "other", seed=1), 16, mode="ram")
    assert not gone.exists() and other.path.exists()


def test_off_keeps_nothing_after_the_run(tmp_path: Path) -> None:
    cache = open_image_cache(_images(tmp_path / "img"), 16, mode="off")
    path = cache.path
    assert path.exists() and owner_tag() in path.name and cache.read(1).shape == (16, 16, 3)
    del cache
    gc.collect()
    assert not path.exists()


def test_a_killed_runs_private_cache_is_removed(tmp_path: Path) -> None:
    ram = _ram(tmp_path)
    ram.mkdir(parents=True)
    dead = ram / f"images-16px-x-2-y.private-{cache_store.owner_tag().rsplit('-', 1)[0]}-999999999.cache"
    dead.write_bytes(b"left by a SIGKILL")
    open_image_cache(_images(tmp_path / "img"), 16, mode="off")
    assert not dead.exists()


def test_ram_that_is_short_falls_back_to_disk_with_a_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(cache_store, "mem_available_bytes", lambda: 1000)  # far less than the cache
    with caplog.at_level(logging.WARNING):
        cache = open_image_cache(_images(tmp_path / "img"), 16, mode="ram")
    assert cache.path.is_relative_to(tmp_path / "cache")
    assert "does not fit in RAM here" in caplog.text and "GiB of memory available" in caplog.text


def test_unused_ram_caches_are_evicted_oldest_first_to_make_room(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    old = open_image_cache(_images(tmp_path / "a"), 16, mode="ram").path
    newer = open_image_cache(_images(tmp_path / "b", seed=1), 16, mode="ram").path
    gc.collect()
    os.utime(old, (1e9, 1e9))
    size = old.stat().st_size  # all three caches have this size
    # The cap is half of (available + our caches): 0.5 * (3 + 2) sizes = room for two caches, not three.
    monkeypatch.setattr(cache_store, "mem_available_bytes", lambda: 3 * size)
    third = open_image_cache(_images(tmp_path / "c", seed=2), 16, mode="ram")
    assert third.path.parent == _ram(tmp_path)
    assert not old.exists() and newer.exists()


def test_clean_removes_every_unused_cache_and_build_leftover(tmp_path: Path) -> None:
    ram_cache = open_image_cache(_images(tmp_path / "a"), 16, mode="ram").path
    disk_cache = open_image_cache(_images(tmp_path / "b", seed=1), 16, mode="disk").path
    gc.collect()
    leftover = ram_cache.parent / f".{ram_cache.name}.{owner_tag().rsplit('-', 1)[0]}-999999999.build.tmp"
    leftover.write_bytes(b"half a build")
    removed, kept = clean_image_caches()
    assert sorted(e.path for e in removed) == sorted([ram_cache, disk_cache]) and kept == []
    assert not ram_cache.exists() and not disk_cache.exists() and not leftover.exists()


def test_an_empty_or_unknown_setting_is_named() -> None:
    with pytest.raises(ConfigError, match="cache='' is not a cache setting"):
        parse_cache_setting("")
    with pytest.raises(ConfigError, match=r"cache='dsik' is not one of .*did you mean 'disk'"):
        parse_cache_setting("dsik")
