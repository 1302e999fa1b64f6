"""Where LibreYOLO keeps what it can rebuild: bundled datasets, fallback label caches.

One root for all of it, so a user can find it, move it (``LIBREYOLO_CACHE_DIR``) or delete it.
The environment variable is read on every call, not at import, so tests and long-lived processes
can point it elsewhere without reloading modules.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_DIR_ENV = "LIBREYOLO_CACHE_DIR"


def cache_dir() -> Path:
    """The cache root: ``$LIBREYOLO_CACHE_DIR`` when set and non-empty, else ``~/.cache/libreyolo``.

    Not created here: callers create the subfolder they write to, so merely asking for the path
    (for a message, say) leaves no trace on disk.
    """
    override = os.environ.get(CACHE_DIR_ENV, "").strip()
    if override:
        return Path(override).expanduser().absolute()
    return Path.home() / ".cache" / "libreyolo"


def cache_subdir(*parts: str) -> Path:
    """``cache_dir() / parts...``, created (with parents) if missing.

    Raises:
        OSError: the folder cannot be created; the message of ``mkdir`` names the path. Callers
            that can live without a cache catch it and say so.
    """
    path = cache_dir().joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path
