"""Where image caches live, how much room they may take, and when they go away.

A cache setting (``cache=`` of train and val) is one of:

==================  ==============================================================================
``"auto"``          RAM (``/dev/shm``) when it fits under the RAM cap below, else disk; and, when
                    training renders batches on a CUDA device, a copy in GPU memory if it fits in
                    a quarter of the free memory there (``device_cache``)
``"gpu"``           like ``"auto"`` on the host, and always a copy on the training device
                    (``device_cache``: workers then ship tile indices, not pixels)
``"ram"``           RAM; falls back to disk, with a warning, when memory or ``/dev/shm`` is short
``"disk"``          ``<cache dir>/images`` (``$LIBREYOLO_CACHE_DIR`` or ``~/.cache/libreyolo``)
a folder path       that folder (e.g. ``cache=/scratch/libreyolo``): a fast local disk
``"off"``           nothing kept: a private file for this run, deleted when the run ends
``True`` / ``False``  ``"ram"`` / ``"off"`` (Ultralytics' spelling)
==================  ==============================================================================

RAM caches go in ``$LIBREYOLO_SHM_DIR/libreyolo-<uid>`` (default ``/dev/shm``). tmpfs is memory,
and its files outlive the process until deleted, so caches here have a lifecycle:

- A process using a cache holds a shared ``flock`` on the file for as long as it does; nothing
  below removes a file that is locked (checked with a non-blocking exclusive lock).
- When a cache is built, older caches of the same split (same image folder and ``imgsz``, other
  contents) in the same folder are removed, as are caches whose image folder no longer exists.
- RAM caches are capped: together they stay under half of the memory (``MemAvailable`` plus
  their own size). Before a RAM cache is built, unused ones are evicted, least recently used
  first, to keep under the cap; if it still does not fit, the cache goes to disk with a message.
- ``libreyolo cache`` lists every cache; ``libreyolo cache clean`` removes every unused one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..atomic_write import is_abandoned, owner_tag, parse_owner, remove_stale_temps
from ..cache_dir import cache_dir as default_cache_dir
from ..errors import ConfigError
from .cache_file import read_cache_source

log = logging.getLogger(__name__)

CacheMode = Literal["ram", "disk", "auto", "gpu", "off"]
CacheSetting = str | bool | os.PathLike[str]
SHM_DIR_ENV = "LIBREYOLO_SHM_DIR"
CACHE_SUFFIX = ".cache"
PRIVATE_TAG = ".private-"
"""In the name of an ``"off"`` cache, followed by ``<host>-<pid>``: removed once that process is gone."""

RAM_SHARE = 0.5     # LibreYOLO's RAM caches together stay under this share of the memory (see _ram_room)
ROOM_MARGIN = 1.05  # a location needs this much more free space than the file

_MODES = ("ram", "disk", "auto", "gpu", "off")


@dataclass(frozen=True)
class CachePlace:
    """A parsed cache setting: the mode and, for a folder path, that folder."""

    mode: CacheMode
    folder: Path | None = None

    def __str__(self) -> str:
        return str(self.folder) if self.folder is not None else self.mode


def parse_cache_setting(value: CacheSetting | CachePlace, cache_dir: Path | None = None) -> CachePlace:
    """``"auto"``, ``"ram"``, ``"disk"``, ``"gpu"``, ``"off"``, a folder, True or False -> a ``CachePlace``.

    Args:
        value: the setting (see the module docstring).
        cache_dir: the folder for ``"disk"`` (default ``<cache dir>/images``).

    Raises:
        ConfigError: an empty value, or a word that is neither a mode nor a path.
    """
    if isinstance(value, CachePlace):
        return value
    if isinstance(value, bool):
        return CachePlace("ram" if value else "off")
    text = os.fspath(value).strip() if isinstance(value, str | os.PathLike) else None
    if not text:
        raise ConfigError(f"cache={value!r} is not a cache setting; use 'auto', 'ram', 'disk', 'gpu', 'off' or a "
                          "folder path (e.g. cache=/scratch/libreyolo)")
    if text.lower() in _MODES:
        mode: CacheMode = text.lower()  # type: ignore[assignment]
        return CachePlace(mode, Path(cache_dir) if mode == "disk" and cache_dir is not None else None)
    if text.lower() in ("true", "false"):
        return CachePlace("ram" if text.lower() == "true" else "off")
    if os.sep not in text and "/" not in text and not text.startswith((".", "~")):
        import difflib

        hint = difflib.get_close_matches(text.lower(), _MODES, n=1)
        raise ConfigError(f"cache={text!r} is not one of {', '.join(map(repr, _MODES))}"
                          + (f" (did you mean {hint[0]!r}?)" if hint else "")
                          + "; a folder for a disk cache must be a path, e.g. cache=./my-cache")
    return CachePlace("disk", Path(text).expanduser())


def ram_dir() -> Path | None:
    """This user's folder in ``$LIBREYOLO_SHM_DIR`` (default ``/dev/shm``); None without one."""
    root = Path(os.environ.get(SHM_DIR_ENV, "").strip() or "/dev/shm")
    if not root.is_dir():
        return None
    user = os.getuid() if hasattr(os, "getuid") else 0
    return root / f"libreyolo-{user}"


def disk_dir(place: CachePlace | None = None) -> Path:
    """The folder a disk cache of ``place`` goes to."""
    if place is not None and place.folder is not None:
        return place.folder
    return default_cache_dir() / "images"


def free_bytes(directory: Path) -> int:
    """Free bytes of the file system ``directory`` is (or will be) on."""
    probe = directory
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free


def mem_available_bytes() -> int | None:
    """``MemAvailable`` from ``/proc/meminfo``; None where there is no such file."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def choose_dir(place: CachePlace, nbytes: int) -> Path:
    """Where a new cache of ``nbytes`` goes; RAM only when memory allows, else disk with a message.

    Room in RAM is the free space of ``/dev/shm`` and ``RAM_SHARE`` of the available memory
    (tmpfs pages are memory: filling ``/dev/shm`` past it swaps or kills processes). Unused RAM
    caches are evicted, least recently used first, to make that room.
    """
    disk = disk_dir(place)
    if place.mode == "disk":
        return disk
    ram = ram_dir()
    if ram is not None and _ram_room(ram, nbytes, place):
        return ram
    level = logging.WARNING if place.mode == "ram" else logging.INFO
    skip = " (use cache='disk' to skip this check)" if place.mode == "ram" else ""
    if ram is None:  # nowhere to put a RAM cache at all: say so, not that it is too large
        configured = os.environ.get(SHM_DIR_ENV, "").strip()
        why = (f"{SHM_DIR_ENV}={configured} is not a folder; point it at an existing tmpfs folder or unset it"
               if configured else "this system has no /dev/shm")
        log.log(level, "image cache: no RAM cache folder (%s); caching on disk in %s instead%s", why, disk, skip)
        return disk
    available = mem_available_bytes()
    facts = f"{free_bytes(ram) / 2**30:.2f} GiB free in {ram.parent}"
    facts += f", {available / 2**30:.2f} GiB of memory available" if available is not None else ""
    log.log(level, "image cache: %.2f GiB does not fit in RAM here (%s); caching on disk in %s instead%s",
            nbytes / 2**30, facts, disk, skip)
    return disk


def _ram_room(ram: Path, nbytes: int, place: CachePlace) -> bool:
    """Whether a cache of ``nbytes`` may go to RAM, after evicting unused caches if that helps.

    The cap: LibreYOLO's RAM caches together (this one included) stay under ``RAM_SHARE`` of the
    memory there would be without them (``MemAvailable`` plus their size, which it excludes).
    """
    entries = list_cache_files(ram) if ram.is_dir() else []
    ours = sum(e.nbytes for e in entries)
    available = mem_available_bytes()
    memory = None if available is None else available + ours

    def fits() -> bool:
        memory_ok = memory is None or ours + nbytes < RAM_SHARE * memory
        return memory_ok and free_bytes(ram) > nbytes * ROOM_MARGIN

    for entry in sorted(entries, key=lambda e: e.used_at):  # least recently used first
        if fits():
            return True
        if not entry.in_use and remove_cache_file(entry.path, "evicted to make room in RAM"):
            ours -= entry.nbytes
    return fits()


# --------------------------------------------------------------------------- locks


@contextlib.contextmanager
def build_lock(lock_path: Path, target: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_path``: one builder per cache file, across processes."""
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


def hold_in_use(path: Path) -> int | None:
    """Open ``path`` with a shared lock that marks it in use; returns the fd (None: no flock here).

    Also refreshes the file's access time, which eviction reads as "last used".
    """
    try:
        import fcntl
    except ImportError:
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        now = time.time()
        os.utime(path, (now, os.stat(path).st_mtime))
    except OSError:
        os.close(fd)
        raise
    return fd


def is_in_use(path: Path) -> bool:
    """Whether a process holds ``path`` (a shared lock blocks our exclusive probe)."""
    try:
        import fcntl
    except ImportError:
        return False
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- listing and removal


@dataclass(frozen=True)
class CacheFile:
    """One image cache file found on disk or in RAM."""

    path: Path
    nbytes: int
    used_at: float      # last time a process opened it (its access time)
    in_use: bool
    source: str | None  # the image folder it was built from; None when unreadable


def list_cache_files(directory: Path) -> list[CacheFile]:
    """The LibreYOLO image caches in ``directory`` (not recursive), newest use first."""
    found: list[CacheFile] = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return found
    for name in names:
        path = directory / name
        if not (name.startswith("images-") and name.endswith(CACHE_SUFFIX)):
            continue
        try:
            st = path.stat()
        except OSError:
            continue
        found.append(CacheFile(path, st.st_size, max(st.st_atime, st.st_mtime), is_in_use(path),
                               read_cache_source(path)))
    return sorted(found, key=lambda e: -e.used_at)


def remove_cache_file(path: Path, why: str) -> bool:
    """Delete a cache file and its lock file unless a process uses it; True when removed."""
    if is_in_use(path):
        return False
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    except OSError as err:
        log.info("image cache: could not remove %s (%s)", path, err.strerror or err)
        return False
    Path(f"{path}.lock").unlink(missing_ok=True)
    log.info("image cache: removed %s (%s)", path, why)
    return True


def remove_replaced(directory: Path, kept: Path, split_prefix: str) -> None:
    """After ``kept`` is built: remove other caches of the same split, and orphans, in ``directory``.

    Args:
        directory: the folder ``kept`` is in.
        kept: the new cache file.
        split_prefix: the name prefix shared by every cache of the same split and ``imgsz``.
    """
    for entry in list_cache_files(directory):
        if entry.path == kept or entry.in_use:
            continue
        if entry.path.name.startswith(split_prefix):
            remove_cache_file(entry.path, f"replaced by {kept.name}")
        elif entry.source is not None and not Path(entry.source).exists():
            remove_cache_file(entry.path, f"its images ({entry.source}) are gone")
    remove_dead_private_files(directory)


def remove_dead_private_files(directory: Path) -> None:
    """Remove ``"off"`` caches whose owning process has ended (a killed run cannot clean up)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        owner = _owner(name)
        if owner is not None and is_abandoned(directory / name, owner):
            (directory / name).unlink(missing_ok=True)
            log.info("image cache: removed %s, left by ended process %d", directory / name, owner[1])


def private_suffix() -> str:
    """The name tag of a file owned by this process: ``.private-<host>-<pid>``."""
    return f"{PRIVATE_TAG}{owner_tag()}"


def _owner(name: str) -> tuple[str, int] | None:
    if PRIVATE_TAG not in name:
        return None
    return parse_owner(name.split(PRIVATE_TAG, 1)[1].split(".", 1)[0])


def clean_image_caches(folders: list[Path] | None = None) -> tuple[list[CacheFile], list[CacheFile]]:
    """Remove every unused image cache in ``folders`` (default: the RAM and disk folders).

    Returns:
        ``(removed, kept_in_use)``.
    """
    removed: list[CacheFile] = []
    kept: list[CacheFile] = []
    for folder in folders if folders is not None else default_folders():
        remove_dead_private_files(folder)
        for entry in list_cache_files(folder):
            if entry.in_use:
                kept.append(entry)
            elif remove_cache_file(entry.path, "cache clean"):
                removed.append(entry)
        remove_stale_temps(folder)  # builds killed mid-way
    return removed, kept


def default_folders() -> list[Path]:
    """The RAM folder (when there is one) and the default disk folder."""
    ram = ram_dir()
    return [p for p in (ram, disk_dir()) if p is not None]
