"""Finding weights by name: a local path, then the weights folder, then the Hugging Face hub.

``LibreYOLO("LibreYOLO9t.pt")`` looks for ``LibreYOLO9t.pt`` as given, then in the weights folder
(``$LIBREYOLO_WEIGHTS_DIR``, default ``./weights``), then downloads the file named by the family's
weights table with the Hugging Face hub client (``huggingface_hub``). A table URL without a scheme
is relative to the hub endpoint: ``$LIBREYOLO_HUB_URL``, else the client's ``$HF_ENDPOINT``, else
https://huggingface.co.

The client brings the hub's protocol: revisions, redirects to its CDN, resumed transfers, the
user's token for private and gated repos (``HF_TOKEN`` or ``hf auth login``), ``HF_HUB_OFFLINE``.
This module adds what a model zoo needs on top of it:

- a file reaches the weights folder complete and only after its sha256 matched the weights table's
  (or, where the table has none, the LFS sha256 the hub publishes for the file);
- every wait is bounded: one metadata request without retries (left alone, the client retries an
  unreachable hub with back-off: 23 s of sleeps for a refused connection, minutes for a silent
  one), the client's per-read timeout (``$HF_HUB_DOWNLOAD_TIMEOUT``, 10 s by default),
  and a cap on the bytes received, so a server that keeps cutting the transfer short and ignores
  the resume request cannot keep the client restarting it forever;
- nothing is left behind by a failure: no partial file, no client metadata, no empty folder.

``huggingface_hub`` is imported when a download starts, not with this module: importing its
download code takes most of a second, which ``libreyolo --help`` should not pay.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote, urlsplit

from .atomic_write import umask_mode
from .contract.spec import WeightsEntry
from .errors import ConfigError, WeightsNotFoundError

if TYPE_CHECKING:
    from huggingface_hub import HfFileMetadata
    from huggingface_hub.utils import tqdm as HubProgress

log = logging.getLogger(__name__)

DEFAULT_HUB_URL = "https://huggingface.co"
HUB_URL_ENV = "LIBREYOLO_HUB_URL"
WEIGHTS_DIR_ENV = "LIBREYOLO_WEIGHTS_DIR"
OFFLINE_ENV = "HF_HUB_OFFLINE"
METADATA_TIMEOUT_S = 10.0
# A transfer that resumes where it was cut receives each byte once; one that the server restarts
# from zero each time receives the same bytes again. Past this many times the file's size (plus a
# MiB of slack) the download is abandoned: the client resets its retry count whenever bytes arrive,
# so nothing else would end it.
MAX_RECEIVED_PER_FILE_BYTE = 2
UNSIZED_DOWNLOAD_LIMIT_BYTES = 4 << 30  # the cap when the hub states no size (weights are far smaller)
_TRUE_WORDS = {"1", "ON", "YES", "TRUE"}  # the client's own reading of boolean variables


def weights_dir() -> Path:
    """The folder searched for bare weight names and where downloads are stored."""
    return Path(os.environ.get(WEIGHTS_DIR_ENV, "weights")).expanduser()


def hub_url(url: str) -> str:
    """An absolute download URL: a table URL relative to the hub endpoint is joined to it."""
    if "://" in url:
        return url
    endpoint = os.environ.get(HUB_URL_ENV) or os.environ.get("HF_ENDPOINT") or DEFAULT_HUB_URL
    return f"{endpoint.rstrip('/')}/{url.lstrip('/')}"


@dataclass(frozen=True)
class HubFile:
    """One file of a hub model repo, as the client addresses it.

    Attributes:
        endpoint: the hub's base URL (``https://huggingface.co``, or a mirror or test server).
        repo_id: ``<owner>/<name>`` (``LibreYOLO/LibreYOLO9t``).
        revision: branch, tag or commit (``main``).
        filename: path inside the repo (``LibreYOLO9t.pt``).
    """

    endpoint: str
    repo_id: str
    revision: str
    filename: str

    @property
    def url(self) -> str:
        return (f"{self.endpoint}/{self.repo_id}/resolve/{quote(self.revision, safe='')}/"
                f"{quote(self.filename)}")


def parse_hub_url(url: str) -> HubFile:
    """Split a hub download URL (``<endpoint>/<owner>/<name>/resolve/<revision>/<path>``).

    Raises:
        ConfigError: the URL does not have that shape (a weights table names only hub files).
    """
    parts = urlsplit(hub_url(url))
    head, sep, tail = parts.path.partition("/resolve/")
    prefix, _, repo_name = head.rpartition("/")
    base, _, owner = prefix.rpartition("/")
    revision, _, filename = tail.partition("/")
    if not (parts.scheme and parts.netloc and sep and owner and repo_name and revision and filename):
        raise ConfigError(f"weights URL {url!r} is not a hub file URL; expected "
                          "'<owner>/<repo>/resolve/<revision>/<file>', relative to the hub or absolute")
    return HubFile(endpoint=f"{parts.scheme}://{parts.netloc}{base}", repo_id=f"{owner}/{repo_name}",
                   revision=unquote(revision), filename=unquote(filename))


def is_offline() -> bool:
    """``HF_HUB_OFFLINE`` is set: as the client read it at import, or in the environment now."""
    from huggingface_hub import constants

    return constants.is_offline_mode() or os.environ.get(OFFLINE_ENV, "").upper() in _TRUE_WORDS


def resolve_weights(name: str | Path, *, entry: WeightsEntry | None, untrained_hint: str) -> Path:
    """Return a local path for ``name``, downloading it from the hub if needed.

    Args:
        name: a path, or a bare file name like ``LibreYOLO9t.pt``.
        entry: the family's weights-table entry for this name (None: not a published name,
            so nothing is downloaded).
        untrained_hint: how to build the same architecture without weights; put in the error.

    Raises:
        WeightsNotFoundError: not found anywhere (offline, unreachable, not on the hub, or the
            download failed its checks); says where it looked and how to build an untrained
            model instead.
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
            return download_weights(url, weights_dir() / given.name, sha256=entry.sha256)
        except HubDownloadError as err:
            looked.append(f"{url} ({err})")
    raise WeightsNotFoundError(
        f"weights {str(name)!r} not found; looked in: {'; '.join(looked)}. "
        f"Check the name or your network connection, put the file in {str(weights_dir())!r} "
        f"(or set ${WEIGHTS_DIR_ENV}), or build an untrained model of this architecture with "
        f"{untrained_hint.rstrip('.')}.")


class HubDownloadError(OSError):
    """A file could not be had from the hub; the message is the reason (HTTP status, offline...)."""


class ChecksumError(HubDownloadError):
    """A downloaded file's sha256 is not the expected one (the file was deleted)."""


def download_weights(url: str, dest: Path, *, sha256: str | None = None) -> Path:
    """Download the hub file at ``url`` to ``dest`` through the hub client; returns ``dest``.

    The file is fetched at the commit the metadata request saw (so the digest checked belongs to
    the bytes received) into a private folder beside ``dest`` (``local_dir=``, rather than the
    client's cache: the weights folder is where users look, and deleting one folder removes the
    file with the metadata the client keeps for it; a copy already in the client's cache at that
    commit is still reused). It is verified there and renamed into place, so ``dest`` never holds
    a partial or unverified file; a process killed mid-download leaves only a hidden
    ``.<name>.*.download`` folder. The expected digest is ``sha256`` (the weights table) or else
    the hub's LFS sha256; a file with neither is refused, since nothing would vouch for it.

    Raises:
        HubDownloadError: offline, unreachable, an HTTP error, a transfer cut short or endlessly
            restarted, or (``ChecksumError``) a sha256 mismatch. Nothing was kept.
    """
    source = parse_hub_url(url)
    if is_offline():
        raise HubDownloadError(f"not tried: offline mode (${OFFLINE_ENV} is set)")
    metadata = _fetch_metadata(source)
    expected, vouched_by = _expected_sha256(source, metadata, sha256)
    created = _missing_folders(dest.parent)
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".download", dir=dest.parent))
    try:
        staged = _fetch_file(source, metadata, staging)
        _verify(staged, expected, vouched_by, source.url)
        os.chmod(staged, umask_mode())  # whatever the client made it: what the user's umask says
        os.replace(staged, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        for folder in created:  # innermost first: a failed download leaves no empty folders
            try:
                folder.rmdir()
            except OSError:
                break
        raise
    shutil.rmtree(staging, ignore_errors=True)  # the client's metadata and lock files
    log.info("downloaded %s -> %s (sha256 %s, from the %s)", source.url, dest, expected, vouched_by)
    return dest


def _fetch_metadata(source: HubFile) -> HfFileMetadata:
    """One HEAD request, no retries: commit, LFS sha256 and size of the file, or HubDownloadError."""
    from huggingface_hub import get_hf_file_metadata

    from .version import __version__

    try:
        metadata = get_hf_file_metadata(source.url, timeout=METADATA_TIMEOUT_S, endpoint=source.endpoint,
                                        library_name="libreyolo", library_version=__version__)
    except Exception as err:
        reason = _reason(err)
        if reason is None:
            raise  # not a hub problem but a bug: shown as it is
        raise HubDownloadError(reason) from err
    if not metadata.commit_hash:
        raise HubDownloadError(f"{source.endpoint} does not answer as a Hugging Face hub (no X-Repo-Commit "
                               f"header); check ${HUB_URL_ENV} / $HF_ENDPOINT")
    return metadata


def _expected_sha256(source: HubFile, metadata: HfFileMetadata, table: str | None) -> tuple[str, str]:
    if table:
        return table.lower(), "weights table"
    published = (metadata.etag or "").lower()
    if len(published) == 64 and all(c in "0123456789abcdef" for c in published):
        return published, "hub's LFS digest"
    raise HubDownloadError(f"{source.url} publishes no sha256 (ETag {metadata.etag!r}) and the weights table has "
                           "none, so a download could not be verified; download the file yourself and pass its path")


def _fetch_file(source: HubFile, metadata: HfFileMetadata, staging: Path) -> Path:
    from huggingface_hub import hf_hub_download

    from .version import __version__

    limit = (metadata.size * MAX_RECEIVED_PER_FILE_BYTE + (1 << 20) if metadata.size
             else UNSIZED_DOWNLOAD_LIMIT_BYTES)
    log.info("downloading %s (commit %s) into %s", source.url, metadata.commit_hash, staging.parent)
    # The client makes its own HEAD first; it falls back to its back-off retries (bounded: five, at
    # most 8 s apart) only if the hub stopped answering since ours, a moment ago.
    try:
        return Path(hf_hub_download(
            source.repo_id, source.filename, revision=metadata.commit_hash, endpoint=source.endpoint,
            local_dir=staging, etag_timeout=METADATA_TIMEOUT_S, library_name="libreyolo",
            library_version=__version__, tqdm_class=_bounded_progress(limit)))
    except HubDownloadError:
        raise
    except Exception as err:
        reason = _reason(err)
        if reason is None:
            raise
        raise HubDownloadError(f"{reason}; the partial download was deleted") from err


def _bounded_progress(limit_bytes: int) -> type[HubProgress]:
    """The client's progress bar class, made to stop a transfer once ``limit_bytes`` have arrived.

    The client reports every chunk it receives to its bar, across its own retries, so the bar is
    where the bytes of one download can be counted.
    """
    from huggingface_hub.utils import tqdm

    class BoundedProgress(tqdm):
        received_bytes = 0  # per download: this class is made anew for each one

        def update(self, n: float | None = 1) -> bool | None:
            if n and n > 0:
                BoundedProgress.received_bytes += int(n)
                if BoundedProgress.received_bytes > limit_bytes:
                    raise HubDownloadError(
                        f"the transfer kept being cut short and restarted ({BoundedProgress.received_bytes} "
                        f"bytes received, limit {limit_bytes}); the partial download was deleted")
            return super().update(n)

    return BoundedProgress


def _verify(path: Path, expected: str, vouched_by: str, url: str) -> None:
    with path.open("rb+") as fh:
        got = hashlib.file_digest(fh, "sha256").hexdigest()
        os.fsync(fh.fileno())  # durable before the rename makes it visible
    if got != expected:
        raise ChecksumError(f"sha256 mismatch for {url}: got {got}, expected {expected} (from the {vouched_by}); "
                            "the downloaded file was deleted (a corrupted transfer, or a file changed on the hub)")


def _reason(err: BaseException) -> str | None:
    """The cause of a failed hub request, in the words the user needs to act on it.

    None for an error that is no hub or transfer problem (a bug), which the caller re-raises.
    """
    import httpx2
    from huggingface_hub.errors import (
        FileMetadataError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
    )

    if isinstance(err, OfflineModeIsEnabled):
        return f"not tried: offline mode (${OFFLINE_ENV} is set)"
    if isinstance(err, HfHubHTTPError) and err.response is not None:
        code = err.response.status_code
        if isinstance(err, RepositoryNotFoundError) or code in (401, 403):
            return (f"HTTP {code}: no such repo, or it is private or gated; if you have access, log in with "
                    "`hf auth login` or set HF_TOKEN")
        return f"HTTP {code}"
    if isinstance(err, httpx2.TransportError):
        return f"offline or unreachable: {str(err) or type(err).__name__}"
    if isinstance(err, LocalEntryNotFoundError) and err.__cause__ is not None:
        return _reason(err.__cause__)  # the client's wrapper around a failed metadata request
    if isinstance(err, FileMetadataError):
        return f"not a Hugging Face hub answer: {str(err).splitlines()[0]}"
    if isinstance(err, OSError):  # the client's size check, a full disk
        return (str(err).splitlines() or [type(err).__name__])[0]
    return None


def _missing_folders(folder: Path) -> list[Path]:
    """``folder`` and its parents that do not exist yet, innermost first."""
    missing = []
    folder = folder.absolute()
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing
