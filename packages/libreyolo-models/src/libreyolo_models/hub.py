"""Finding weights by name: a local path, then the weights folder, then the hub download.

``LibreYOLO("LibreYOLO9t.pt")`` looks for ``LibreYOLO9t.pt`` as given, then in the weights
folder (``$LIBREYOLO_WEIGHTS_DIR``, default ``./weights``), then downloads the URL of the family's
weights table (relative URLs are joined to ``$LIBREYOLO_HUB_URL``, default the Hugging Face hub).
A download lands in the weights folder atomically and only after its sha256 matched.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from tqdm import tqdm

from .atomic_write import owner_tag, remove_stale_temps, umask_mode
from .errors import WeightsNotFoundError
from .family_spec import WeightsEntry

log = logging.getLogger(__name__)

DEFAULT_HUB_URL = "https://huggingface.co"
HUB_URL_ENV = "LIBREYOLO_HUB_URL"
WEIGHTS_DIR_ENV = "LIBREYOLO_WEIGHTS_DIR"
DOWNLOAD_TIMEOUT_S = 30.0


def weights_dir() -> Path:
    """The folder searched for bare weight names and where downloads are stored."""
    return Path(os.environ.get(WEIGHTS_DIR_ENV, "weights")).expanduser()


def hub_url(url: str) -> str:
    """An absolute download URL: a table URL relative to the hub endpoint is joined to it."""
    if "://" in url:
        return url
    return f"{os.environ.get(HUB_URL_ENV, DEFAULT_HUB_URL).rstrip('/')}/{url.lstrip('/')}"


def resolve_weights(name: str | Path, *, entry: WeightsEntry | None, untrained_hint: str) -> Path:
    """Return a local path for ``name``, downloading it from the hub if needed.

    Args:
        name: a path, or a bare file name like ``LibreYOLO9t.pt``.
        entry: the family's weights-table entry for this name (None: not a published name,
            so nothing is downloaded).
        untrained_hint: how to build the same architecture without weights; put in the error.

    Raises:
        WeightsNotFoundError: not found anywhere; says where it looked and how to build an
            untrained model instead.
    """
    given = Path(name).expanduser()
    if given.is_file():
        return given
    looked = [str(given)]
    is_bare = given.name == str(name)
    if is_bare:
        local = weights_dir() / given.name
        if local.is_file():
            return local
        looked.append(str(local))
    if is_bare and entry is not None:
        url = hub_url(entry.url)
        try:
            return download_file(url, weights_dir() / given.name, sha256=entry.sha256)
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


class ChecksumError(OSError):
    """A downloaded file's sha256 is not the published one (the file was deleted)."""


def download_file(url: str, dest: Path, *, sha256: str | None = None,
                  timeout_s: float = DOWNLOAD_TIMEOUT_S) -> Path:
    """Download ``url`` to ``dest`` atomically with a progress bar; returns ``dest``.

    A partial or corrupted download never replaces or masquerades as a complete file: the data
    goes to a temporary file beside ``dest`` and is renamed only when the byte count and the
    sha256 match. The expected digest is ``sha256`` (the weights table), else the one the hub
    publishes for large files (its ``X-Linked-Etag`` / ``ETag`` header); a download with
    neither is refused, since nothing would vouch for it.
    """
    created = _missing_folders(dest.parent)
    dest.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(dest.parent, dest.name)  # a download killed mid-way
    try:
        return _download(url, dest, sha256=sha256, timeout_s=timeout_s)
    except BaseException:
        for folder in created:  # innermost first: a failed download leaves no empty folders
            try:
                folder.rmdir()
            except OSError:
                break
        raise


def _missing_folders(folder: Path) -> list[Path]:
    """``folder`` and its parents that do not exist yet, innermost first."""
    missing = []
    folder = folder.absolute()
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


def _published_digest(headers: object) -> str | None:
    for key in ("X-Linked-Etag", "ETag"):
        value = str(getattr(headers, "get", lambda _k: None)(key) or "").strip().strip('"').removeprefix("W/")
        value = value.strip('"').lower()
        if len(value) == 64 and all(c in "0123456789abcdef" for c in value):
            return value
    return None


def _download(url: str, dest: Path, *, sha256: str | None, timeout_s: float) -> Path:
    log.info("downloading %s -> %s", url, dest)
    request = urllib.request.Request(url, headers={"User-Agent": "libreyolo"})
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.{owner_tag()}.", suffix=".tmp", dir=dest.parent)
    try:
        digest = hashlib.sha256()
        with urllib.request.urlopen(request, timeout=timeout_s) as response, os.fdopen(fd, "wb") as out:
            total = int(response.headers.get("Content-Length") or 0) or None
            expected = (sha256 or _published_digest(response.headers) or "").lower()
            if not expected:
                raise ChecksumError(f"{url} publishes no sha256 and the weights table has none, so the download "
                                    "cannot be verified; download the file yourself and pass its path")
            done = 0
            with tqdm(total=total, unit="B", unit_scale=True, desc=dest.name, leave=False) as bar:
                while chunk := response.read(1 << 20):
                    out.write(chunk)
                    digest.update(chunk)
                    done += len(chunk)
                    bar.update(len(chunk))
            out.flush()
            os.fsync(out.fileno())
        if total is not None and done != total:
            raise OSError(f"download of {url} was cut short: {done} of {total} bytes")
        if digest.hexdigest() != expected:
            raise ChecksumError(f"sha256 mismatch for {url}: got {digest.hexdigest()}, expected {expected}; "
                                "the partial file was deleted (a corrupted transfer or a changed file on the hub)")
        os.chmod(tmp, umask_mode())  # mkstemp made it owner-only
        shutil.move(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return dest
