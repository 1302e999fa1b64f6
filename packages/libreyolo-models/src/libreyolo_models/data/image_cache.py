"""Decode-once image cache: every image of a split decoded and resized once, one copy per host.

Decoding JPEGs and resizing them every epoch is most of what starves a GPU. So each image is
decoded once (PIL, EXIF orientation applied), resized so its long side is ``imgsz`` (aspect kept)
and stored as uint8 RGB in one fixed-shape array ``[N, S, S, 3]`` (image ``i`` fills the top-left
``h x w`` of slot ``i``) with a table of sizes. The array lives in one memory-mapped file, so every
DataLoader worker and every DDP rank of a host reads the same pages: one copy, not one per
process. Workers open it lazily, read-only, after they start.

Where the file goes: ``"ram"`` puts it in ``/dev/shm`` (``$LIBREYOLO_SHM_DIR`` overrides; tmpfs is
RAM, and files there outlive the run until deleted or reboot), ``"disk"`` in
``<cache dir>/images`` (``$LIBREYOLO_CACHE_DIR`` or ``~/.cache/libreyolo``; the page cache keeps it
warm), ``"auto"`` in RAM when the array is under half of the available memory. The file name
carries a hash of every image's path, size and mtime and of ``imgsz``: any edit makes a new file,
and an unchanged split reuses the old one. A build writes a temporary file and renames it, under a
lock file, so concurrent processes build it once; under DDP rank 0 builds before the others look.

File layout (native byte order)::

    0           header: magic, then uint64 n, imgsz, table offset, images offset
    4096        int32 [n, 4]: cached (h, w), original (h, w) after EXIF orientation
    images      uint8 [n, imgsz, imgsz, 3]; the part of a slot outside its image is zero
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import math
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Literal

import numpy as np
from PIL import Image, ImageOps
from tqdm import tqdm

import libreyolo_ddp

from ..cache_dir import cache_dir as default_cache_dir
from ..errors import ConfigError, LibreYOLOError
from .decode import to_rgb8

log = logging.getLogger(__name__)

CacheMode = Literal["ram", "disk", "auto"]
SHM_DIR_ENV = "LIBREYOLO_SHM_DIR"
FORMAT_VERSION = 1
"""Bump when decoding or the layout changes: old files then no longer match any name."""

_MAGIC = b"LYIMGC01"
_TABLE_OFFSET = 4096
_PAGE = 4096
_RAM_SHARE = 0.5    # "auto": RAM when the array is under this share of MemAvailable
_ROOM_MARGIN = 1.05  # a location needs this much more free space than the file
_EXIF_ORIENTATION = 0x0112
_ROTATED = {5, 6, 7, 8}  # EXIF orientations that swap width and height


class ImageCacheError(LibreYOLOError, OSError):
    """The cache cannot be built or read (the message names the file and what to do)."""


class ImageCache:
    """A built cache file, opened read-only; cheap to pickle into DataLoader workers.

    Attributes:
        path: the cache file.
        imgsz: slot side ``S``; each image's long side.
        hw: ``int32 [N, 2]`` cached ``(h, w)`` per image.
        ori_hw: ``int32 [N, 2]`` original ``(h, w)`` after EXIF orientation.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            with open(self.path, "rb") as f:
                head = f.read(8 + 4 * 8)
                n, imgsz, table_at, images_at = (int(v) for v in np.frombuffer(head[8:], np.uint64))
                f.seek(table_at)
                table = np.frombuffer(f.read(n * 16), np.int32).reshape(n, 4)
        except (OSError, ValueError) as err:
            raise ImageCacheError(f"image cache {self.path} cannot be read ({err}); delete it and it "
                                  f"is rebuilt on the next run") from err
        if head[:8] != _MAGIC or self.path.stat().st_size < images_at + n * imgsz * imgsz * 3:
            raise ImageCacheError(f"image cache {self.path} is not a complete LibreYOLO image cache; "
                                  f"delete it and it is rebuilt on the next run")
        self.imgsz = imgsz
        self.hw = table[:, :2].copy()
        self.ori_hw = table[:, 2:].copy()
        self._images_at = images_at
        self._images: np.memmap | None = None
        self._pid = os.getpid()

    def __len__(self) -> int:
        return len(self.hw)

    @property
    def nbytes(self) -> int:
        """Bytes of pixel data (``N * S * S * 3``)."""
        return len(self) * self.imgsz * self.imgsz * 3

    def _array(self) -> np.memmap:
        # Opened on first use in each process (a worker maps the file itself after it starts);
        # a map inherited through fork would work too, but one per process is simpler to reason about.
        if self._images is None or self._pid != os.getpid():
            self._images = np.memmap(self.path, dtype=np.uint8, mode="r", offset=self._images_at,
                                     shape=(len(self), self.imgsz, self.imgsz, 3))
            self._pid = os.getpid()
        return self._images

    def read_into(self, index: int, out: np.ndarray) -> None:
        """Copy image ``index`` into ``out`` (``uint8 [S, S, 3]``): one memcpy of its rows.

        Only the top ``h`` rows are written; the rest of ``out`` is left as it was (every reader
        uses only the ``hw[index]`` region).
        """
        h = int(self.hw[index, 0])
        out[:h] = self._array()[index, :h]

    def read(self, index: int) -> np.ndarray:
        """Image ``index`` as a fresh ``uint8 [h, w, 3]`` RGB array."""
        h, w = (int(v) for v in self.hw[index])
        return np.array(self._array()[index, :h, :w])

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_images"] = None  # workers map the file themselves
        return state


Decoder = Callable[[Path, int], tuple[np.ndarray, tuple[int, int]]]
"""``(path, imgsz) -> (uint8 [h, w, 3] with h, w <= imgsz, original (h, w))``: what fills a slot."""


def open_image_cache(paths: Sequence[Path], imgsz: int, *, mode: CacheMode = "auto",
                     cache_dir: Path | None = None, threads: int | None = None,
                     decode: Decoder | None = None) -> ImageCache:
    """Open the cache of ``paths`` at ``imgsz``, building it first if no process has.

    Under DDP, rank 0 builds (or finds) the file, every rank waits at a barrier, then the other
    ranks open it; a rank on another host whose ``/dev/shm`` lacks the file builds its own copy,
    once per host thanks to the lock file.

    Args:
        paths: image files, in the split's order (index ``i`` of the cache is ``paths[i]``).
        imgsz: the long side every image is resized to; also the slot side.
        mode: ``"ram"``, ``"disk"`` or ``"auto"`` (see the module docstring).
        cache_dir: folder for ``"disk"`` caches; default ``<cache dir>/images``.
        threads: decoding threads; default ``min(32, cpu count)``.
        decode: how a file becomes its slot; default ``decode_image`` (long side to ``imgsz``).
            Another decoder (classification's centre crop) gets its own file: its qualified
            name is part of the file name's hash.

    Raises:
        ConfigError: a bad ``mode`` or ``imgsz``, or no images.
        ImageCacheError: an image cannot be decoded (all such files are listed), or there is no
            room for the file.
    """
    if mode not in ("ram", "disk", "auto"):
        raise ConfigError(f"cache={mode!r} is not one of 'ram', 'disk', 'auto'")
    if isinstance(imgsz, bool) or not isinstance(imgsz, int) or imgsz < 1:
        raise ConfigError(f"imgsz={imgsz!r} must be a positive integer number of pixels (e.g. 640)")
    if not paths:
        raise ConfigError("the split has no images to cache; check the data.yaml split paths")
    decode = decode or decode_image
    name = cache_file_name(paths, imgsz, "" if decode is decode_image else decode.__qualname__)
    env = libreyolo_ddp.dist_env()
    if not (libreyolo_ddp.is_dist_initialized() and env.world_size > 1):
        return _open_or_build(paths, imgsz, name, mode, cache_dir, threads, decode)
    cache = _open_or_build(paths, imgsz, name, mode, cache_dir, threads, decode) if env.rank == 0 else None
    libreyolo_ddp.barrier()
    return cache if cache is not None else _open_or_build(paths, imgsz, name, mode, cache_dir, threads, decode)


def cache_file_name(paths: Sequence[Path], imgsz: int, decoder: str = "") -> str:
    """File name of the cache of ``paths`` at ``imgsz``: changes when any image file changes."""
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
    return f"images-{imgsz}px-{len(paths)}-{digest.hexdigest()[:20]}.cache"


def _open_or_build(paths: Sequence[Path], imgsz: int, name: str, mode: CacheMode,
                   cache_dir: Path | None, threads: int | None, decode: Decoder) -> ImageCache:
    ram, disk = _ram_dir(), _disk_dir(cache_dir)
    choices: dict[str, list[Path | None]] = {"ram": [ram, disk], "disk": [disk], "auto": [ram, disk]}
    lookup = choices[mode]
    for directory in lookup:
        if directory is not None and (found := _try_open(directory / name)) is not None:
            log.info("image cache: reusing %s", found.path)
            return found
    nbytes = _data_offset(len(paths)) + len(paths) * imgsz * imgsz * 3
    directory = _choose_dir(mode, nbytes, ram, disk)
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / name
    with _file_lock(final.with_name(final.name + ".lock"), final):
        if (found := _try_open(final)) is not None:  # another process built it while we waited
            return found
        _build(paths, imgsz, final, threads or min(32, os.cpu_count() or 1), decode)
    return ImageCache(final)


def _try_open(path: Path) -> ImageCache | None:
    if not path.exists():
        return None
    try:
        return ImageCache(path)
    except ImageCacheError as err:
        log.warning("image cache %s is unusable (%s); rebuilding it", path, err)
        path.unlink(missing_ok=True)
        return None


def _ram_dir() -> Path | None:
    root = Path(os.environ.get(SHM_DIR_ENV, "").strip() or "/dev/shm")
    if not root.is_dir():
        return None
    user = os.getuid() if hasattr(os, "getuid") else os.getpid()
    return root / f"libreyolo-{user}"


def _disk_dir(cache_dir: Path | None) -> Path:
    return Path(cache_dir) if cache_dir is not None else default_cache_dir() / "images"


def _free_bytes(directory: Path) -> int:
    probe = directory
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free


def _mem_available_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _choose_dir(mode: CacheMode, nbytes: int, ram: Path | None, disk: Path) -> Path:
    gib = nbytes / 2**30
    if mode == "disk":
        return disk
    ram_free = _free_bytes(ram) if ram is not None else 0
    has_room = ram is not None and ram_free > nbytes * _ROOM_MARGIN
    if mode == "ram":
        if ram is not None and has_room:
            return ram
        log.warning("cache='ram': the images need %.2f GiB but %s has %.2f GiB free; caching on disk "
                    "in %s instead (free space in /dev/shm, or use cache='disk')", gib,
                    ram or "/dev/shm (missing)", ram_free / 2**30, disk)
        return disk
    available = _mem_available_bytes()
    if ram is not None and has_room and available is not None and nbytes < _RAM_SHARE * available:
        return ram
    log.info("image cache: %.2f GiB is too much for RAM here (%.2f GiB available); caching on disk in %s",
             gib, (available or 0) / 2**30, disk)
    return disk


@contextlib.contextmanager
def _file_lock(lock_path: Path, target: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_path``: one builder per file, across processes."""
    try:
        import fcntl as locking
    except ImportError:  # no flock (Windows): an exclusive-create lock file instead
        locking = None  # type: ignore[assignment]
    if locking is None:
        while True:
            try:
                fd = os.open(lock_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                break
            except FileExistsError:
                time.sleep(0.2)
        try:
            yield
        finally:
            os.close(fd)
            lock_path.unlink(missing_ok=True)
        return
    with open(lock_path, "a+b") as f:
        try:
            locking.flock(f.fileno(), locking.LOCK_EX | locking.LOCK_NB)
        except BlockingIOError:
            log.info("image cache: waiting for another process to finish building %s", target)
            locking.flock(f.fileno(), locking.LOCK_EX)
        try:
            yield
        finally:
            locking.flock(f.fileno(), locking.LOCK_UN)


def _data_offset(n: int) -> int:
    return -(-(_TABLE_OFFSET + n * 16) // _PAGE) * _PAGE


def _build(paths: Sequence[Path], imgsz: int, final: Path, threads: int, decode: Decoder) -> None:
    n = len(paths)
    images_at = _data_offset(n)
    total = images_at + n * imgsz * imgsz * 3
    free = _free_bytes(final.parent)
    if free < total * _ROOM_MARGIN:
        raise ImageCacheError(f"the image cache needs {total / 2**30:.2f} GiB but {final.parent} has "
                              f"{free / 2**30:.2f} GiB free; free space there, or point cache_dir (or "
                              f"$LIBREYOLO_CACHE_DIR) at a larger disk, or lower imgsz")
    for stale in final.parent.glob(final.name + ".tmp*"):  # a killed build's leftovers (we hold the lock)
        stale.unlink(missing_ok=True)
    tmp = final.with_name(f"{final.name}.tmp{os.getpid()}")
    log.info("image cache: decoding %d images at %d px into %s (%.2f GiB, %d threads)",
             n, imgsz, final, total / 2**30, threads)
    start = time.perf_counter()
    try:
        with open(tmp, "wb") as f:
            _reserve(f, total)
        images = np.memmap(tmp, dtype=np.uint8, mode="r+", offset=images_at, shape=(n, imgsz, imgsz, 3))
        table = _decode_all(paths, imgsz, images, threads, decode)
        images.flush()
        del images
        header = _MAGIC + np.array([n, imgsz, _TABLE_OFFSET, images_at], np.uint64).tobytes()
        with open(tmp, "r+b") as f:
            f.write(header)
            f.seek(_TABLE_OFFSET)
            f.write(table.tobytes())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    log.info("image cache: built %s in %.1f s", final, time.perf_counter() - start)


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
                decode: Decoder) -> np.ndarray:
    """Decode every image into its slot with a thread pool (PIL releases the GIL while decoding)."""
    table = np.zeros((len(paths), 4), np.int32)
    failures: list[str] = []

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
                    failures.append(f"{paths[i]}: {err}")
                bar.update(1)
            _refill(pool, work, todo, pending, window)
    if failures:
        listing = "\n  ".join(failures[:20]) + (f"\n  ... and {len(failures) - 20} more" if len(failures) > 20 else "")
        raise ImageCacheError(f"{len(failures)} image(s) could not be decoded for the image cache:\n  "
                              f"{listing}\nfix or remove these files (the dataset check should have "
                              f"caught them: was a file changed after the scan?)")
    return table


def _refill(pool: ThreadPoolExecutor, work: Callable[[int], None], todo: Iterator[int],
            pending: dict[Future[None], int], window: int) -> None:
    for i in todo:
        pending[pool.submit(work, i)] = i
        if len(pending) >= window:
            return


def decode_image(path: Path, imgsz: int) -> tuple[np.ndarray, tuple[int, int]]:
    """Decode one image as the cache stores it.

    EXIF orientation applied, converted to 8-bit RGB (``decode.to_rgb8``: 16-bit images scaled,
    not clipped), resized so its long side is ``imgsz`` with an
    antialiasing bilinear filter. Large JPEGs are decoded at a reduced DCT scale first
    (``Image.draft``), still at least the target size, which makes decoding several times faster.

    Returns:
        ``uint8 [h, w, 3]`` pixels and the original ``(h, w)`` after orientation.
    """
    with Image.open(path) as im:
        raw_w, raw_h = im.size
        rotated = int(im.getexif().get(_EXIF_ORIENTATION, 1)) in _ROTATED
        ori_h, ori_w = (raw_w, raw_h) if rotated else (raw_h, raw_w)
        ratio = imgsz / max(ori_h, ori_w)
        h, w = max(1, round(ori_h * ratio)), max(1, round(ori_w * ratio))
        if ratio < 1:
            im.draft("RGB", (math.ceil(raw_w * ratio), math.ceil(raw_h * ratio)))
        rgb = to_rgb8(ImageOps.exif_transpose(im))
        if rgb.size != (w, h):
            rgb = rgb.resize((w, h), Image.Resampling.BILINEAR)
        return np.asarray(rgb), (ori_h, ori_w)
