"""The image cache's file layout, shared by its reader/builder (``image_cache``) and its
housekeeping (``cache_store``: listing, orphan removal), so neither imports the other.

Layout (native byte order)::

    0           header: magic, then uint64 n, imgsz, table offset, images offset, meta offset,
                meta length
    4096        int32 [n, 4]: cached (h, w), original (h, w) after EXIF orientation; (0, 0) failed
    images      uint8 [n, imgsz, imgsz, 3]; the part of a slot outside its image is zero
    meta        JSON: the split's image folder ("source") and the failed images with their reasons
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

import numpy as np

MAGIC = b"LYIMGC02"
"""Bump with ``image_cache.FORMAT_VERSION`` when the layout changes."""

HEADER_BYTES = 8 + 6 * 8
TABLE_OFFSET = 4096
PAGE = 4096


def data_offset(n: int) -> int:
    """Where the pixel array of ``n`` images starts: after the table, page-aligned."""
    return -(-(TABLE_OFFSET + n * 16) // PAGE) * PAGE


def pack_header(n: int, imgsz: int, images_at: int, meta_at: int, meta_len: int) -> bytes:
    return MAGIC + np.array([n, imgsz, TABLE_OFFSET, images_at, meta_at, meta_len], np.uint64).tobytes()


def read_header(f: IO[bytes]) -> tuple[bytes, tuple[int, ...]]:
    """The magic and ``(n, imgsz, table_at, images_at, meta_at, meta_len)`` at the start of ``f``."""
    head = f.read(HEADER_BYTES)
    return head[:8], tuple(int(v) for v in np.frombuffer(head[8:HEADER_BYTES], np.uint64))


def read_meta(f: IO[bytes], meta_at: int, meta_len: int) -> dict[str, Any]:
    f.seek(meta_at)
    return json.loads(f.read(meta_len).decode())


def read_cache_source(path: Path) -> str | None:
    """The image folder a cache file was built from (for listing and orphan removal); None if unreadable."""
    try:
        with open(path, "rb") as f:
            magic, fields = read_header(f)
            if magic != MAGIC:
                return None
            return read_meta(f, fields[4], fields[5]).get("source")
    except (OSError, ValueError, UnicodeDecodeError):
        return None
