"""Finding weights by name: a local path, then the weights folder, then the hub download.

``LibreYOLO("LibreYOLO9t.pt")`` looks for ``LibreYOLO9t.pt`` as given, then in the weights
folder (``$LIBREYOLO_WEIGHTS_DIR``, default ``./weights``), then downloads
``<base>/<name>/resolve/main/<name>.pt`` where ``<base>`` is ``$LIBREYOLO_HUB_URL`` (default
upstream's Hugging Face organisation). Downloads land in the weights folder atomically.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from tqdm import tqdm

from .errors import WeightsNotFoundError

log = logging.getLogger(__name__)

DEFAULT_HUB_URL = "https://huggingface.co/LibreYOLO"
HUB_URL_ENV = "LIBREYOLO_HUB_URL"
WEIGHTS_DIR_ENV = "LIBREYOLO_WEIGHTS_DIR"
DOWNLOAD_TIMEOUT_S = 30.0


def weights_dir() -> Path:
    """The folder searched for bare weight names and where downloads are stored."""
    return Path(os.environ.get(WEIGHTS_DIR_ENV, "weights"))


def hub_url(filename: str) -> str:
    """Download URL of a weights file name such as ``LibreYOLO9t.pt``."""
    base = os.environ.get(HUB_URL_ENV, DEFAULT_HUB_URL).rstrip("/")
    stem = Path(filename).stem
    return f"{base}/{stem}/resolve/main/{stem}.pt"


def resolve_weights(name: str | Path, *, untrained_hint: str, download: bool = True) -> Path:
    """Return a local path for ``name``, downloading it from the hub if needed.

    Args:
        name: a path, or a bare file name like ``LibreYOLO9t.pt``.
        untrained_hint: how to build the same architecture without weights; put in the error.
        download: allow the hub download (the last resort).

    Raises:
        WeightsNotFoundError: not found anywhere; says where it looked and how to build an
            untrained model instead.
    """
    given = Path(name)
    if given.is_file():
        return given
    looked = [str(given)]
    is_bare = given.name == str(name)
    if is_bare:
        local = weights_dir() / given.name
        if local.is_file():
            return local
        looked.append(str(local))
    if is_bare and download:
        url = hub_url(given.name)
        try:
            return download_file(url, weights_dir() / given.name)
        except (urllib.error.URLError, OSError, TimeoutError) as err:
            looked.append(f"{url} ({_reason(err)})")
    raise WeightsNotFoundError(
        f"weights {str(name)!r} not found; looked in: {'; '.join(looked)}. "
        f"Check the name or your network connection, put the file in {str(weights_dir())!r} "
        f"(or set ${WEIGHTS_DIR_ENV}), or build an untrained model of this architecture with "
        f"{untrained_hint}.")


def _reason(err: BaseException) -> str:
    if isinstance(err, urllib.error.HTTPError):
        return f"HTTP {err.code}"
    if isinstance(err, urllib.error.URLError):
        return f"offline or unreachable: {err.reason}"
    return str(err) or type(err).__name__


def download_file(url: str, dest: Path, *, timeout_s: float = DOWNLOAD_TIMEOUT_S) -> Path:
    """Download ``url`` to ``dest`` atomically with a progress bar; returns ``dest``.

    A partial download never replaces or masquerades as a complete file: the data goes to a
    temporary file beside ``dest`` and is renamed only when the byte count matches.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    log.info("downloading %s -> %s", url, dest)
    request = urllib.request.Request(url, headers={"User-Agent": "libreyolo"})
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response, os.fdopen(fd, "wb") as out:
            total = int(response.headers.get("Content-Length") or 0) or None
            done = 0
            with tqdm(total=total, unit="B", unit_scale=True, desc=dest.name, leave=False) as bar:
                while chunk := response.read(1 << 20):
                    out.write(chunk)
                    done += len(chunk)
                    bar.update(len(chunk))
            out.flush()
            os.fsync(out.fileno())
        if total is not None and done != total:
            raise OSError(f"download of {url} was cut short: {done} of {total} bytes")
        shutil.move(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return dest
