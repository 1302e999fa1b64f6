"""Per-split cache of a scan's results, so the second run does not re-open every image.

A scan (verify every image, parse every label) is the slow part of loading a split. Its result is
stored next to the labels as ``<split>.cache.npz`` and reused while a fingerprint still matches:
a hash of every input file's path, size and mtime plus the settings that change the result (the
class count, the checking rules' version). Any edited, added or removed file changes the hash.

The file is an ``.npz`` read with ``allow_pickle=False``: a cache must never be able to run code.
It holds one JSON document (paths, sizes, problems, counters) as bytes and the label rows as one
``float32 [M, 5]`` array. Writes are atomic (temp file, fsync, rename), so a crash or a second
process (DDP ranks scan too) leaves either the old cache or the new one, never half of one. When
the dataset folder is read-only the cache goes to ``<cache dir>/labels/`` instead.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..atomic_write import atomic_write
from ..cache_dir import cache_dir
from .image_check import ImageCheck
from .label_check import LabelCheck
from .split_index import DataProblem

log = logging.getLogger(__name__)

CACHE_VERSION = 2
"""Bump when the checking rules or the file layout change: old caches are then rescanned."""

CACHE_SUFFIX = ".cache.npz"


@dataclass
class SplitScan:
    """What scanning one split found: the usable images and every problem (filled by ``add``).

    Attributes:
        images: usable image paths, in the split's order.
        sizes: per image, ``(height, width)`` after EXIF orientation.
        labels: per image, ``float32 [n, 5]`` rows (class, cx, cy, w, h), normalized.
        problems: skipped files and fixed files, each with its reason.
        counts: counters for the summary line (``no_label_file``; ``crowd`` for COCO).
    """

    images: list[Path] = field(default_factory=list)
    sizes: list[tuple[int, int]] = field(default_factory=list)
    labels: list[np.ndarray] = field(default_factory=list)
    problems: list[DataProblem] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, image: Path, image_check: ImageCheck, label_source: Path,
            label_check: LabelCheck | None) -> None:
        """Record one image's verdicts: kept (with any notes as problems) or skipped.

        Args:
            image: the image file.
            image_check: its ``check_image`` result.
            label_source: the file its labels came from (a ``.txt``, or the COCO JSON), named in
                label problems.
            label_check: its labels; None when it has no label file (a background image).
        """
        if image_check.error is not None or image_check.size is None:
            self.problems.append(DataProblem(image, image_check.error or "unreadable image"))
            return
        if label_check is not None and label_check.error is not None:
            self.problems.append(DataProblem(label_source, label_check.error))
            return
        if image_check.note:
            self.problems.append(DataProblem(image, image_check.note, skipped=False))
        if label_check is not None and label_check.notes:
            self.problems.append(DataProblem(label_source, "; ".join(label_check.notes), skipped=False))
        if label_check is None:
            self.counts["no_label_file"] = self.counts.get("no_label_file", 0) + 1
        self.images.append(image)
        self.sizes.append(image_check.size)
        self.labels.append(label_check.rows if label_check is not None else np.zeros((0, 5), np.float32))


def fingerprint(files: Iterable[Path], settings: Mapping[str, object]) -> str:
    """Hash of the files' (path, size, mtime) and ``settings``: equal hash, equal scan result.

    A file that does not exist hashes as missing, so creating a label file later changes the
    hash. Contents are not read: stat is what keeps the cached path fast.
    """
    h = hashlib.sha256()
    h.update(json.dumps({"version": CACHE_VERSION, **settings}, sort_keys=True, default=str).encode())
    for path in files:
        try:
            st = os.stat(path)
            stamp = f"{st.st_size}:{st.st_mtime_ns}:{st.st_mode & 0o170000}"
        except OSError:
            stamp = "missing"
        h.update(os.fsencode(path) + b"\0" + stamp.encode() + b"\n")
    return h.hexdigest()


def cached_scan(split: str, folder: Path, key: str, scan: Callable[[], SplitScan], *,
                use_cache: bool, cache_name: str | None = None) -> SplitScan:
    """Return the cached scan for ``key`` if one exists, else run ``scan()`` and cache it.

    Args:
        split: split name, used in the cache file name and in log lines.
        folder: where the cache belongs (the labels folder, the list's or the JSON's folder).
        key: the ``fingerprint`` of everything the scan reads.
        scan: the slow path, called only on a miss.
        use_cache: False skips reading and writing the cache entirely.
        cache_name: the cache file's stem when ``split`` alone could clash (several COCO JSON
            files of one split in one folder); defaults to ``split``.
    """
    if not use_cache:
        return scan()
    primary, fallback = cache_paths(cache_name or split, folder)
    for path in (primary, fallback):
        cached = _load(path, key)
        if cached is not None:
            log.info("%s: labels of %d images read from cache %s", split, len(cached.images), path)
            return cached
    result = scan()
    try:
        _save(primary, key, result)
    except OSError as err:
        try:
            fallback.parent.mkdir(parents=True, exist_ok=True)
            _save(fallback, key, result)
        except OSError as err2:
            log.warning("%s: label cache not written to %s (%s) nor %s (%s); the next run scans again",
                        split, primary, err.strerror or err, fallback, err2.strerror or err2)
        else:
            log.info("%s: cannot write label cache in %s (%s); wrote %s instead",
                     split, primary.parent, err.strerror or err, fallback)
    return result


def cache_paths(name: str, folder: Path) -> tuple[Path, Path]:
    """The cache file beside the data, and its stand-in under the cache dir (read-only data)."""
    tag = hashlib.sha1(os.fsencode(folder)).hexdigest()[:16]
    return folder / f"{name}{CACHE_SUFFIX}", cache_dir() / "labels" / f"{tag}-{name}{CACHE_SUFFIX}"


def _save(path: Path, key: str, result: SplitScan) -> None:
    """Write atomically: a reader sees the old file or the complete new one."""
    meta = {
        "version": CACHE_VERSION,
        "key": key,
        "images": [os.fspath(p) for p in result.images],
        "sizes": [list(s) for s in result.sizes],
        "problems": [[os.fspath(p.path), p.reason, p.skipped] for p in result.problems],
        "counts": result.counts,
    }
    rows = [np.asarray(lab, dtype=np.float32).reshape(-1, 5) for lab in result.labels]
    labels = np.concatenate(rows) if rows else np.zeros((0, 5), np.float32)
    n_rows = np.array([len(r) for r in rows], dtype=np.int64)
    # Readable by whoever may read the dataset (the umask decides, as for any new file).
    atomic_write(path, lambda f: np.savez_compressed(
        f, meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), labels=labels, n_rows=n_rows))


def _load(path: Path, key: str) -> SplitScan | None:
    """The cached scan if ``path`` holds one for ``key``; None for absent, stale or damaged."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as npz:
            meta = json.loads(npz["meta"].tobytes().decode())
            if meta.get("version") != CACHE_VERSION or meta.get("key") != key:
                return None
            labels, n_rows = npz["labels"].astype(np.float32, copy=False), npz["n_rows"]
        if len(n_rows) != len(meta["images"]) or int(n_rows.sum()) != len(labels) or labels.shape[1:] != (5,):
            raise ValueError("row counts do not match the label array")
        return SplitScan(
            images=[Path(p) for p in meta["images"]],
            sizes=[(int(h), int(w)) for h, w in meta["sizes"]],
            labels=list(np.split(labels, np.cumsum(n_rows)[:-1])) if len(n_rows) else [],
            problems=[DataProblem(Path(p), reason, bool(skipped)) for p, reason, skipped in meta["problems"]],
            counts={k: int(v) for k, v in meta["counts"].items()},
        )
    except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as err:
        # a damaged cache costs one rescan, never a failed run
        log.info("label cache %s unreadable (%s); scanning again", path, err)
        return None
