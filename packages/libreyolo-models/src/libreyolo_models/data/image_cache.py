"""Decode-once image cache: every image of a split decoded and resized once, one copy per host.

Decoding JPEGs and resizing them every epoch is most of what starves a GPU. So each image is
decoded once (by ``decode.read_image_file``, the decoder predict and the dataset check use),
resized so its long side is ``imgsz`` (aspect kept) and stored as uint8 RGB in one fixed-shape
array ``[N, S, S, 3]`` (image ``i`` fills the top-left ``h x w`` of slot ``i``) with a table of
sizes. The array lives in one memory-mapped file, so every DataLoader worker and every DDP rank of
a host reads the same pages: one copy, not one per process. Workers open it lazily, read-only.

Where the file goes, how big it may be and when it is removed is ``cache_store``'s business (the
``cache=`` setting: ``"auto"``, ``"ram"``, ``"disk"``, ``"gpu"``, a folder, ``"off"``). The file name carries
a tag of the split (its image folder and ``imgsz``) and a hash of every image's path, size and
mtime: any edit makes a new file (the old one of the same split is then removed), and an unchanged
split reuses the old one. A build writes a temporary file and renames it, under a lock file, so
concurrent processes build it once; under DDP rank 0 builds before the others look.

An image that fails to decode while the cache is built (a file changed after the dataset check)
does not stop the run: its slot stays empty, the file and the reason are recorded in the cache,
and ``usable_part`` leaves it out of the split with one warning naming it.

The file layout is in ``cache_file``.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import sys
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

import libreyolo_ddp

from ..atomic_write import owner_tag, remove_stale_temps
from ..errors import ConfigError, LibreYOLOError
from . import cache_file, cache_store
from .cache_store import CacheMode, CachePlace, CacheSetting, parse_cache_setting
from .decode import ImageDecodeError, read_image_file
from .errors import EmptySplitError
from .split_index import DataProblem, SplitIndex

__all__ = ["CacheMode", "CacheSetting", "ImageCache", "ImageCacheError", "decode_image", "open_image_cache",
           "usable_part"]

log = logging.getLogger(__name__)

SHM_DIR_ENV = cache_store.SHM_DIR_ENV
FORMAT_VERSION = 2
"""Bump when decoding or the layout changes: old files then no longer match any name."""



class ImageCacheError(LibreYOLOError, OSError):
    """The cache cannot be built or read (the message names the file and what to do)."""


class ImageCache:
    """A built cache file, opened read-only; cheap to pickle into DataLoader workers.

    While the object lives, this process holds a shared lock on the file, which tells cleaners
    (``libreyolo cache clean``, eviction, replacement) that it is in use.

    Attributes:
        path: the cache file.
        imgsz: slot side ``S``; each image's long side.
        hw: ``int32 [N, 2]`` cached ``(h, w)`` per image.
        ori_hw: ``int32 [N, 2]`` original ``(h, w)`` after EXIF orientation.
        failed: slot -> why that image could not be decoded when the cache was built.
        source: the split's image folder (common parent of its images).
    """

    _owner: ImageCache  # set on views only (``without``): keeps the in-use lock of the file alive

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            with open(self.path, "rb") as f:
                magic, (n, imgsz, table_at, images_at, meta_at, meta_len) = cache_file.read_header(f)
                f.seek(table_at)
                table = np.frombuffer(f.read(n * 16), np.int32).reshape(n, 4)
                meta = cache_file.read_meta(f, meta_at, meta_len)
        except (OSError, ValueError, UnicodeDecodeError) as err:
            raise ImageCacheError(f"image cache {self.path} cannot be read ({err}); delete it and it is "
                                  f"rebuilt on the next run") from err
        if magic != cache_file.MAGIC or self.path.stat().st_size < meta_at + meta_len:
            raise ImageCacheError(f"image cache {self.path} is not a complete LibreYOLO image cache; "
                                  f"delete it and it is rebuilt on the next run")
        self.imgsz = imgsz
        self.hw = table[:, :2].copy()
        self.ori_hw = table[:, 2:].copy()
        self.failed: dict[int, str] = {int(k): str(v) for k, v in meta.get("failed", {}).items()}
        self.source: str | None = meta.get("source")
        self._slots: np.ndarray | None = None  # set by `without`: index -> slot in the file
        self._n_slots = n
        self._images_at = images_at
        self._images: np.memmap | None = None
        self._pid = os.getpid()
        self._hold()

    def _hold(self) -> None:
        try:
            fd = cache_store.hold_in_use(self.path)
        except OSError as err:
            raise ImageCacheError(f"image cache {self.path} cannot be opened ({err.strerror or err})") from err
        if fd is not None:
            weakref.finalize(self, os.close, fd)

    def __len__(self) -> int:
        return len(self.hw)

    @property
    def nbytes(self) -> int:
        """Bytes of pixel data (``N * S * S * 3``)."""
        return len(self) * self.imgsz * self.imgsz * 3

    def without(self, dropped: Sequence[int]) -> ImageCache:
        """A view without the slots ``dropped``: index ``i`` of the view reads the ``i``-th kept slot."""
        view = object.__new__(ImageCache)
        view.__dict__.update(self.__dict__)
        keep = np.setdiff1d(np.arange(len(self)), np.asarray(dropped, dtype=np.int64))
        base = self._slots if self._slots is not None else np.arange(len(self))
        view._slots = base[keep]
        view.hw, view.ori_hw = self.hw[keep], self.ori_hw[keep]
        view.failed = {}
        view._owner = self  # keeps the file's in-use lock alive as long as the view
        return view

    def _slot(self, index: int) -> int:
        return int(self._slots[index]) if self._slots is not None else index

    def _array(self) -> np.memmap:
        # Opened on first use in each process (a worker maps the file itself after it starts);
        # a map inherited through fork would work too, but one per process is simpler to reason about.
        if self._images is None or self._pid != os.getpid():
            self._images = np.memmap(self.path, dtype=np.uint8, mode="r", offset=self._images_at,
                                     shape=(self._n_slots, self.imgsz, self.imgsz, 3))
            self._pid = os.getpid()
        return self._images

    def read_into(self, index: int, out: np.ndarray) -> None:
        """Copy image ``index`` into ``out`` (``uint8 [S, S, 3]``): one memcpy of its rows.

        Only the top ``h`` rows are written; the rest of ``out`` is left as it was (every reader
        uses only the ``hw[index]`` region).
        """
        h = int(self.hw[index, 0])
        out[:h] = self._array()[self._slot(index), :h]

    def read_slots(self, start: int, stop: int) -> np.ndarray:
        """Images ``start .. stop - 1`` as whole slots, ``uint8 [n, S, S, 3]`` (a copy; what
        ``device_cache`` uploads). Beyond each image's ``hw`` the slot holds whatever the file has."""
        if self._slots is None:
            return np.array(self._array()[start:stop])
        return self._array()[self._slots[start:stop]]  # fancy indexing copies

    def read(self, index: int) -> np.ndarray:
        """Image ``index`` as a fresh ``uint8 [h, w, 3]`` RGB array."""
        h, w = (int(v) for v in self.hw[index])
        return np.array(self._array()[self._slot(index), :h, :w])

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_images"] = None  # workers map the file themselves
        state.pop("_owner", None)  # the lock stays with the process that opened the cache
        return state


Decoder = Callable[[Path, int], tuple[np.ndarray, tuple[int, int]]]
"""``(path, imgsz) -> (uint8 [h, w, 3] with h, w <= imgsz, original (h, w))``: what fills a slot."""


def open_image_cache(paths: Sequence[Path], imgsz: int, *, mode: CacheSetting | CachePlace = "auto",
                     cache_dir: Path | None = None, threads: int | None = None,
                     decode: Decoder | None = None) -> ImageCache:
    """Open the cache of ``paths`` at ``imgsz``, building it first if no process has.

    Under DDP, rank 0 builds (or finds) the file while the other ranks wait (if it fails, they
    fail too, naming rank 0, rather than waiting for the group timeout), then they open it; a rank
    on another host whose ``/dev/shm`` lacks the file builds its own copy, once per host thanks to
    the lock file. With ``"off"``, rank 0's private file serves every rank of its host.

    Args:
        paths: image files, in the split's order (index ``i`` of the cache is ``paths[i]``).
        imgsz: the long side every image is resized to; also the slot side.
        mode: the ``cache=`` setting (see ``cache_store``): ``"auto"``, ``"ram"``, ``"disk"``, ``"gpu"``,
            ``"off"``, a folder, or a bool.
        cache_dir: folder for ``"disk"`` caches; default ``<cache dir>/images``.
        threads: decoding threads; default ``min(32, cpu count)``.
        decode: how a file becomes its slot; default ``decode_image`` (long side to ``imgsz``).
            Another decoder (classification's centre crop) gets its own file: its qualified name
            is part of the file name.

    Raises:
        ConfigError: a bad ``mode`` or ``imgsz``, or no images.
        ImageCacheError: there is no room for the file, or an image vanished before the build.
    """
    place = parse_cache_setting(mode, cache_dir)
    if isinstance(imgsz, bool) or not isinstance(imgsz, int) or imgsz < 1:
        raise ConfigError(f"imgsz={imgsz!r} must be a positive integer number of pixels (e.g. 640)")
    if not paths:
        raise ConfigError("the split has no images to cache; check the data.yaml split paths")
    decode = decode or decode_image
    tag = "" if decode is decode_image else decode.__qualname__
    name = cache_file_name(paths, imgsz, tag)
    env = libreyolo_ddp.dist_env()
    threads = threads or min(32, os.cpu_count() or 1)
    if not (libreyolo_ddp.is_dist_initialized() and env.world_size > 1):
        return _open_or_build(paths, imgsz, name, place, threads, decode, tag)
    built: dict[str, ImageCache] = {}

    def build_on_rank_zero() -> str:
        built["cache"] = _open_or_build(paths, imgsz, name, place, threads, decode, tag)
        return str(built["cache"].path)

    # Rank 0 builds while the others wait; if it fails, they raise too instead of waiting forever.
    path = libreyolo_ddp.resolve_on_rank_zero(build_on_rank_zero)
    if "cache" in built:
        return built["cache"]
    if place.mode == "off" and (found := _try_open(Path(path))) is not None:
        return found  # rank 0's private file serves the ranks of its host
    return _open_or_build(paths, imgsz, name, place, threads, decode, tag)  # found by name; or built on another host


def cache_file_name(paths: Sequence[Path], imgsz: int, decoder: str = "") -> str:
    """File name of the cache of ``paths`` at ``imgsz``: ``<split tag>-<hash of every file's stat>``
    (``decoder`` names a decoder other than the default one)."""
    digest = hashlib.sha256(f"v{FORMAT_VERSION}|{imgsz}|{len(paths)}\n".encode())
    if decoder:  # the default decoder adds nothing, so existing caches keep their names
        digest.update(f"decoder={decoder}\n".encode())
    for path in paths:
        try:
            st = os.stat(path)
        except OSError as err:
            raise ImageCacheError(f"image {path} cannot be read for the image cache ({err.strerror}); "
                                  f"restore the file or remove it from the split") from err
        digest.update(f"{os.path.abspath(path)}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    return f"{_split_prefix(paths, imgsz, decoder)}{len(paths)}-{digest.hexdigest()[:20]}{cache_store.CACHE_SUFFIX}"


def _split_prefix(paths: Sequence[Path], imgsz: int, decoder: str = "") -> str:
    """What every cache of this split at this size (and decoder) shares: a hash of the image
    folder; a newer cache with the same prefix replaces the older one."""
    folder = os.fsencode(_source_folder(paths)) + (f"|{decoder}".encode() if decoder else b"")
    tag = hashlib.sha256(folder).hexdigest()[:8]
    return f"images-{imgsz}px-{tag}-"


def _source_folder(paths: Sequence[Path]) -> str:
    folders = {os.path.dirname(os.path.abspath(p)) for p in paths}
    try:
        return os.path.commonpath(sorted(folders))
    except ValueError:  # paths on different drives (Windows)
        return sorted(folders)[0]


def _open_or_build(paths: Sequence[Path], imgsz: int, name: str, place: CachePlace, threads: int,
                   decode: Decoder, tag: str) -> ImageCache:
    nbytes = cache_file.data_offset(len(paths)) + len(paths) * imgsz * imgsz * 3
    if place.mode == "off":
        return _build_private(paths, imgsz, name, place, nbytes, threads, decode)
    ram, disk = cache_store.ram_dir(), cache_store.disk_dir(place)
    lookup = [disk] if place.mode == "disk" else [ram, disk]
    for directory in lookup:
        if directory is not None and (found := _try_open(directory / name)) is not None:
            log.info("image cache: reusing %s", found.path)
            return found
    directory = cache_store.choose_dir(place, nbytes)
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / name
    with cache_store.build_lock(final.with_name(final.name + ".lock"), final):
        if (found := _try_open(final)) is not None:  # another process built it while we waited
            return found
        _build(paths, imgsz, final, threads, decode)
    cache = ImageCache(final)
    cache_store.remove_replaced(directory, final, _split_prefix(paths, imgsz, tag))
    return cache


def _build_private(paths: Sequence[Path], imgsz: int, name: str, place: CachePlace, nbytes: int,
                   threads: int, decode: Decoder) -> ImageCache:
    """``cache="off"``: a file of this process only, deleted when the cache object goes."""
    directory = cache_store.choose_dir(CachePlace("auto"), nbytes)
    directory.mkdir(parents=True, exist_ok=True)
    cache_store.remove_dead_private_files(directory)
    final = directory / (name.removesuffix(cache_store.CACHE_SUFFIX) + cache_store.private_suffix()
                         + cache_store.CACHE_SUFFIX)
    _build(paths, imgsz, final, threads, decode)
    cache = ImageCache(final)
    # Workers map the file by path after they start, so it lives as long as the cache object (or
    # the process: finalizers run at exit). A killed process leaves it; the next build or
    # `libreyolo cache clean` removes it (its name carries the dead process's pid).
    weakref.finalize(cache, _unlink_quietly, final)
    return cache


def _unlink_quietly(path: Path) -> None:
    path.unlink(missing_ok=True)


def _try_open(path: Path) -> ImageCache | None:
    if not path.exists():
        return None
    try:
        return ImageCache(path)
    except ImageCacheError as err:
        log.warning("image cache %s is unusable (%s); rebuilding it", path, err)
        path.unlink(missing_ok=True)
        return None


def _build(paths: Sequence[Path], imgsz: int, final: Path, threads: int, decode: Decoder) -> None:
    n = len(paths)
    images_at = cache_file.data_offset(n)
    meta_at = images_at + n * imgsz * imgsz * 3
    free = cache_store.free_bytes(final.parent)
    if free < meta_at * cache_store.ROOM_MARGIN:
        raise ImageCacheError(f"the image cache needs {meta_at / 2**30:.2f} GiB but {final.parent} has "
                              f"{free / 2**30:.2f} GiB free; free space there (libreyolo cache clean), use "
                              "cache=<a folder on a larger disk> or cache='off', or lower imgsz")
    remove_stale_temps(final.parent, final.name, owned_folder=True)  # a killed build's leftovers: we hold the lock
    tmp = final.with_name(f".{final.name}.{owner_tag()}.build.tmp")
    log.info("image cache: decoding %d images at %d px into %s (%.2f GiB, %d threads)",
             n, imgsz, final, meta_at / 2**30, threads)
    start = time.perf_counter()
    try:
        with open(tmp, "wb") as f:
            _reserve(f, meta_at)
        images = np.memmap(tmp, dtype=np.uint8, mode="r+", offset=images_at, shape=(n, imgsz, imgsz, 3))
        table, failed = _decode_all(paths, imgsz, images, threads, decode)
        images.flush()
        del images
        meta = json.dumps({"source": _source_folder(paths), "failed": {str(i): r for i, r in failed.items()}},
                          ensure_ascii=False).encode()
        with open(tmp, "r+b") as f:
            f.write(cache_file.pack_header(n, imgsz, images_at, meta_at, len(meta)))
            f.seek(cache_file.TABLE_OFFSET)
            f.write(table.tobytes())
            f.seek(meta_at)
            f.write(meta)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    log.info("image cache: built %s in %.1f s%s", final, time.perf_counter() - start,
             f" ({len(failed)} image(s) could not be decoded)" if failed else "")


def _reserve(f: Any, total: int) -> None:
    # Allocating up front turns "no room" into an error now; on tmpfs a full file system would
    # otherwise kill the process with SIGBUS when a page of the map is first written.
    if hasattr(os, "posix_fallocate"):
        try:
            os.posix_fallocate(f.fileno(), 0, total)
            return
        except OSError as err:
            if err.errno not in (errno.EOPNOTSUPP, errno.EINVAL):  # the file system cannot: fall through
                raise ImageCacheError(f"cannot reserve {total / 2**30:.2f} GiB for the image cache "
                                      f"{f.name} ({err.strerror}); free space or use cache='disk'") from err
    f.truncate(total)


def _decode_all(paths: Sequence[Path], imgsz: int, images: np.ndarray, threads: int,
                decode: Decoder) -> tuple[np.ndarray, dict[int, str]]:
    """Decode every image into its slot with a thread pool (PIL releases the GIL while decoding).

    Returns the size table and, per image that failed, why (its slot stays empty).
    """
    table = np.zeros((len(paths), 4), np.int32)
    failed: dict[int, str] = {}

    def work(i: int) -> None:
        pixels, ori_hw = decode(paths[i], imgsz)
        h, w = pixels.shape[:2]
        images[i, :h, :w] = pixels
        table[i] = (h, w, *ori_hw)

    window = 4 * threads  # bounded in-flight work: a million images do not become a million futures
    todo = iter(range(len(paths)))
    pending: dict[Future[None], int] = {}
    with ThreadPoolExecutor(threads, thread_name_prefix="image-cache") as pool, \
            tqdm(total=len(paths), desc=f"caching images at {imgsz}px", unit="img", file=sys.stderr,
                 leave=False) as bar:
        _refill(pool, work, todo, pending, window)
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                i = pending.pop(fut)
                if (err := fut.exception()) is not None:
                    if not isinstance(err, ImageDecodeError | OSError | ValueError | MemoryError):
                        raise err
                    failed[i] = err.reason if isinstance(err, ImageDecodeError) else f"{type(err).__name__}: {err}"
                    table[i] = 0
                bar.update(1)
            _refill(pool, work, todo, pending, window)
    return table, failed


def _refill(pool: ThreadPoolExecutor, work: Callable[[int], None], todo: Iterator[int],
            pending: dict[Future[None], int], window: int) -> None:
    for i in todo:
        pending[pool.submit(work, i)] = i
        if len(pending) >= window:
            return


def decode_image(path: Path, imgsz: int) -> tuple[np.ndarray, tuple[int, int]]:
    """Decode one image as the cache stores it: ``decode.read_image_file`` at long side ``imgsz``.

    Returns:
        ``uint8 [h, w, 3]`` pixels and the original ``(h, w)`` after orientation.

    Raises:
        ImageDecodeError: the file cannot be decoded (the reason says why).
    """
    return read_image_file(path, max_side=imgsz)


def usable_part(index: SplitIndex, cache: ImageCache) -> tuple[SplitIndex, ImageCache, list[DataProblem]]:
    """Leave out the images the cache could not decode, with one warning each.

    Only "no usable image left" is an error: one bad file never stops a run.

    Returns:
        The split and the cache without those images, and one ``DataProblem`` per image left out.

    Raises:
        EmptySplitError: no image of the split could be decoded.
    """
    if not cache.failed:
        return index, cache, []
    problems, keep = cache_failures(index.name, index.images, cache)
    smaller = replace(index, images=[index.images[i] for i in keep], labels=[index.labels[i] for i in keep],
                      sizes=[index.sizes[i] for i in keep] if len(index.sizes) == len(index) else index.sizes,
                      problems=[*index.problems, *problems])
    return smaller, cache.without(sorted(cache.failed)), problems


def cache_failures(split: str, images: Sequence[Path], cache: ImageCache) -> tuple[list[DataProblem], list[int]]:
    """The images of ``split`` the cache could not decode (one warning each) and the indices kept.

    Shared by every task's training pipeline, so a file broken after the dataset check is reported
    the same way whatever the task.

    Raises:
        EmptySplitError: no image of the split could be decoded.
    """
    problems = [DataProblem(images[i], f"{reason} (when decoding for the image cache; was the file "
                                       "changed after the dataset check?)")
                for i, reason in sorted(cache.failed.items())]
    for problem in problems:
        log.warning("%s: skipped %s: %s", split, problem.path, problem.reason)
    if len(cache.failed) == len(images):
        raise EmptySplitError(f"{split}: none of the split's {len(images)} images could be decoded "
                              f"(reasons above); fix the files in {cache.source}")
    return problems, [i for i in range(len(images)) if i not in cache.failed]
