"""Weights by name: local path, weights folder, then the hub client against a loopback hub.

The loopback server speaks the part of the hub's protocol the client uses: ``HEAD`` on
``/<owner>/<repo>/resolve/<revision>/<file>`` answers with the commit (``X-Repo-Commit``), the LFS
sha256 (``X-Linked-Etag``) and size; ``GET`` sends the bytes; unknown files get the hub's 404.
"""

from __future__ import annotations

import hashlib
import http.server
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from libreyolo_models import LibreYOLO, LibreYOLO9, WeightsEntry, WeightsNotFoundError
from libreyolo_models.hub import hub_url, parse_hub_url, resolve_weights
from libreyolo_models.zoo.registry import get_family

COMMIT = "0123456789abcdef0123456789abcdef01234567"
V9T = "/LibreYOLO/LibreYOLO9t/resolve/main/LibreYOLO9t.pt"
HINT = "LibreYOLO('LibreYOLO9t.yaml')"


class _Hub(http.server.BaseHTTPRequestHandler):
    files: dict[str, bytes]          # by table path (revision 'main')
    digest_of: dict[str, bytes]      # publish another file's digest (a file changed on the hub)
    etag: dict[str, str]             # publish this ETag instead (a non-LFS file: git sha1)
    requests: list[tuple[str, str]]
    mode: str                        # "ok", "short" (a complete but short answer), "cut" (drops mid-body)
    token: str | None                # a private repo: this bearer token is required

    def _file(self) -> tuple[str, bytes | None]:
        repo, _, rest = self.path.partition("/resolve/")
        revision, _, name = rest.partition("/")
        key = f"{repo}/resolve/main/{name}" if revision in ("main", COMMIT) else self.path
        return key, self.files.get(key)

    def _head(self) -> bytes | None:
        self.requests.append((self.command, self.path))
        if self.token is not None and self.headers.get("authorization") != f"Bearer {self.token}":
            self.send_response(401)
            self.send_header("X-Error-Code", "RepoNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        key, body = self._file()
        if body is None:
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        etag = self.etag.get(key) or hashlib.sha256(self.digest_of.get(key, body)).hexdigest()
        sent = body[: len(body) // 2] if self.command == "GET" and self.mode == "short" else body
        self.send_response(200)
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("ETag", f'"{etag}"')
        self.send_header("X-Linked-Etag", f'"{etag}"')
        self.send_header("X-Linked-Size", str(len(body)))
        self.send_header("Content-Length", str(len(sent)))
        self.end_headers()
        return sent

    def do_HEAD(self) -> None:  # noqa: N802 - http.server API
        self._head()

    def do_GET(self) -> None:  # noqa: N802 - http.server API
        body = self._head()
        if body is None:
            return
        if self.mode == "cut":  # ignores Range and drops the connection at 90%, every time
            self.wfile.write(body[: len(body) * 9 // 10])
            self.close_connection = True
            return
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(autouse=True)
def _online(monkeypatch: pytest.MonkeyPatch) -> None:
    """Online unless a test says otherwise, even where the shell sets HF_HUB_OFFLINE (the client
    reads it once, at import): these tests only reach their own loopback servers."""
    from huggingface_hub import constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


class _QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that gives up mid-transfer resets the connection: expected here


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[type[_Hub]]:
    handler = type("Hub", (_Hub,), {"files": {}, "digest_of": {}, "etag": {}, "requests": [], "mode": "ok",
                                    "token": None})
    server = _QuietServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    monkeypatch.setenv("LIBREYOLO_HUB_URL", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("LIBREYOLO_WEIGHTS_DIR", str(tmp_path / "weights"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.chdir(tmp_path)
    try:
        yield handler
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def checkpoint_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    model = LibreYOLO9(size="t", nc=80)
    with torch.no_grad():
        model.net.head.cv3[0][2].bias.fill_(0.123)
    path = model.save(tmp_path_factory.mktemp("ckpt") / "LibreYOLO9t.pt")
    return path.read_bytes()


def _entry(sha256: str | None = None) -> WeightsEntry:
    return WeightsEntry(size="t", task="detect", file="LibreYOLO9t.pt", url=V9T.lstrip("/"), sha256=sha256)


def _leftovers(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def test_hub_url_follows_upstream_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LIBREYOLO_HUB_URL")
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    entry = get_family("yolo9").weights_entry("t")
    assert hub_url(entry.url) == "https://huggingface.co/LibreYOLO/LibreYOLO9t/resolve/main/LibreYOLO9t.pt"
    source = parse_hub_url(entry.url)
    assert (source.endpoint, source.repo_id, source.revision, source.filename) == (
        "https://huggingface.co", "LibreYOLO/LibreYOLO9t", "main", "LibreYOLO9t.pt")


def test_every_yolo9_size_has_a_table_entry_on_the_upstream_hub_layout() -> None:
    spec = get_family("yolo9")
    for size in spec.sizes:
        entry = next(e for e in spec.weights if e.size == size)
        source = parse_hub_url(entry.url)
        assert (source.repo_id, source.filename) == (f"LibreYOLO/LibreYOLO9{size}", f"LibreYOLO9{size}.pt")
        assert entry.file == f"LibreYOLO9{size}.pt" and entry.nc == 80


def test_a_table_url_that_is_not_a_hub_file_is_refused_by_name() -> None:
    from libreyolo_models import ConfigError

    with pytest.raises(ConfigError, match=r"'weights/LibreYOLO9t\.pt' is not a hub file URL.*resolve"):
        parse_hub_url("weights/LibreYOLO9t.pt")


def test_bare_name_downloads_into_the_weights_folder_and_is_reused_without_a_request(
        hub, checkpoint_bytes, tmp_path) -> None:
    hub.files[V9T] = checkpoint_bytes
    model = LibreYOLO("LibreYOLO9t.pt")
    assert model.spec.name == "yolo9" and model.size == "t"
    assert model.net.head.cv3[0][2].bias[0].item() == pytest.approx(0.123)
    assert (tmp_path / "weights" / "LibreYOLO9t.pt").read_bytes() == checkpoint_bytes
    # Only the file: no client metadata, lock or staging folder beside it.
    assert _leftovers(tmp_path / "weights") == ["LibreYOLO9t.pt"]
    # One metadata request, then the transfer pinned to the commit that request saw.
    assert [m for m, _ in hub.requests].count("GET") == 1
    assert ("GET", V9T.replace("/main/", f"/{COMMIT}/")) in hub.requests
    seen = len(hub.requests)
    LibreYOLO("LibreYOLO9t.pt")
    assert len(hub.requests) == seen  # found in the weights folder: no request


def test_local_path_wins_over_weights_folder_and_hub(hub, checkpoint_bytes, tmp_path) -> None:
    (tmp_path / "LibreYOLO9t.pt").write_bytes(checkpoint_bytes)
    LibreYOLO("LibreYOLO9t.pt")
    assert hub.requests == []


def test_missing_on_hub_says_where_it_looked_and_how_to_build_untrained(hub, tmp_path) -> None:
    with pytest.raises(WeightsNotFoundError) as err:
        LibreYOLO("LibreYOLO9s.pt")
    text = str(err.value)
    assert "HTTP 404" in text and "/LibreYOLO/LibreYOLO9s/resolve/main/LibreYOLO9s.pt" in text
    assert str(tmp_path / "weights" / "LibreYOLO9s.pt") in text
    assert "LibreYOLO('LibreYOLO9s.yaml')" in text and "LibreYOLO(family='yolo9', size='s'" in text
    assert not (tmp_path / "weights").exists()


def test_unreachable_hub_fails_fast_with_the_url_and_leaves_nothing(monkeypatch, tmp_path) -> None:
    # The repository conftest points the hub at a closed loopback port. Left to itself, the client
    # retries an unreachable hub with back-off (sleeps of 1+2+4+8+8 s); one refused request is all.
    import huggingface_hub.file_download  # noqa: F401 - its import time is not what is measured

    monkeypatch.setenv("LIBREYOLO_WEIGHTS_DIR", str(tmp_path / "w"))
    monkeypatch.chdir(tmp_path)
    start = time.monotonic()
    with pytest.raises(WeightsNotFoundError, match=r"127\.0\.0\.1:9/LibreYOLO/LibreYOLO9c/.*offline or unreachable"):
        LibreYOLO("LibreYOLO9c.pt")
    assert time.monotonic() - start < 10.0
    assert not (tmp_path / "w").exists()


def test_a_failed_download_leaves_no_empty_weights_folders(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("LIBREYOLO_WEIGHTS_DIR", str(tmp_path / "a" / "b" / "weights"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(WeightsNotFoundError, match="offline or unreachable"):
        LibreYOLO("LibreYOLO9c.pt")
    assert list(tmp_path.iterdir()) == []  # not even tmp/a: every folder the download made is gone


def test_a_hub_that_never_answers_times_out(monkeypatch, tmp_path) -> None:
    import libreyolo_models.hub as hub_module

    with socket.socket() as silent:  # accepts connections (the kernel's backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        monkeypatch.setenv("LIBREYOLO_HUB_URL", f"http://127.0.0.1:{silent.getsockname()[1]}")
        monkeypatch.setenv("LIBREYOLO_WEIGHTS_DIR", str(tmp_path / "w"))
        monkeypatch.setattr(hub_module, "METADATA_TIMEOUT_S", 0.5)
        start = time.monotonic()
        with pytest.raises(WeightsNotFoundError, match="offline or unreachable"):
            resolve_weights("LibreYOLO9t.pt", entry=_entry(), untrained_hint=HINT)
        assert time.monotonic() - start < 5.0
    assert not (tmp_path / "w").exists()


def test_hf_hub_offline_is_respected_without_any_request(hub, monkeypatch, tmp_path) -> None:
    hub.files[V9T] = b"weights"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(WeightsNotFoundError, match=r"offline mode \(\$HF_HUB_OFFLINE is set\).*untrained"):
        resolve_weights("LibreYOLO9t.pt", entry=_entry(), untrained_hint=HINT)
    assert hub.requests == []
    assert not (tmp_path / "weights").exists()


def test_offline_mode_still_finds_the_weights_folder(hub, monkeypatch, tmp_path) -> None:
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "LibreYOLO9t.pt").write_bytes(b"weights")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve_weights("LibreYOLO9t.pt", entry=_entry(), untrained_hint=HINT).read_bytes() == b"weights"


def test_a_short_download_is_not_kept(hub, tmp_path) -> None:
    hub.files[V9T] = b"x" * 4096
    hub.mode = "short"
    with pytest.raises(WeightsNotFoundError, match=r"size 4096 but has size 2048.*partial download was deleted"):
        resolve_weights("LibreYOLO9t.pt", entry=_entry(), untrained_hint=HINT)
    assert not (tmp_path / "weights").exists()


def test_a_transfer_that_keeps_being_cut_is_abandoned_and_not_kept(hub, tmp_path) -> None:
    # The client resumes a cut transfer and resets its retry count whenever a chunk (10 MiB) arrives,
    # so a server that always drops the connection would keep it busy forever without the byte cap.
    hub.files[V9T] = b"y" * (24 << 20)
    hub.mode = "cut"
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "other.pt").write_bytes(b"mine")
    with pytest.raises(WeightsNotFoundError, match="kept being cut short"):
        resolve_weights("LibreYOLO9t.pt", entry=_entry(), untrained_hint=HINT)
    gets = [p for m, p in hub.requests if m == "GET"]
    assert len(gets) == 3  # 20 MiB arrive per attempt; the cap is 2 x 24 MiB + 1 MiB
    assert _leftovers(tmp_path / "weights") == ["other.pt"]  # the user's file stays, nothing else


def test_hub_digest_mismatch_deletes_the_download_and_says_so(hub, tmp_path) -> None:
    hub.files[V9T] = b"weights"
    hub.digest_of[V9T] = b"another file"
    with pytest.raises(WeightsNotFoundError, match=r"sha256 mismatch.*from the hub's LFS digest.*deleted"):
        resolve_weights("LibreYOLO9t.pt", entry=_entry(), untrained_hint=HINT)
    assert not (tmp_path / "weights").exists()


def test_table_digest_mismatch_deletes_the_download_and_says_so(hub, tmp_path) -> None:
    hub.files[V9T] = b"weights"
    wrong = hashlib.sha256(b"what the table recorded").hexdigest()
    with pytest.raises(WeightsNotFoundError, match=rf"sha256 mismatch.*expected {wrong} \(from the weights table\)"):
        resolve_weights("LibreYOLO9t.pt", entry=_entry(wrong), untrained_hint=HINT)
    assert not (tmp_path / "weights").exists()


def test_table_digest_wins_over_the_hubs(hub, tmp_path) -> None:
    hub.files[V9T] = b"weights"
    hub.digest_of[V9T] = b"another file"  # the hub's digest would refuse it; the table vouches
    path = resolve_weights("LibreYOLO9t.pt", entry=_entry(hashlib.sha256(b"weights").hexdigest()),
                           untrained_hint=HINT)
    assert path == tmp_path / "weights" / "LibreYOLO9t.pt" and path.read_bytes() == b"weights"


def test_a_file_without_any_sha256_is_refused_before_the_transfer(hub, tmp_path) -> None:
    hub.files[V9T] = b"weights"
    hub.etag[V9T] = hashlib.sha1(b"weights").hexdigest()  # a plain git file: its etag is a sha1
    with pytest.raises(WeightsNotFoundError, match="publishes no sha256.*weights table has none"):
        resolve_weights("LibreYOLO9t.pt", entry=_entry(), untrained_hint=HINT)
    assert [m for m, _ in hub.requests] == ["HEAD"]
    assert not (tmp_path / "weights").exists()


def test_a_private_repo_uses_the_clients_token(hub, monkeypatch, tmp_path) -> None:
    hub.files[V9T] = b"weights"
    hub.token = "hf_loopback"
    with pytest.raises(WeightsNotFoundError, match=r"HTTP 401: .*private or gated.*HF_TOKEN"):
        resolve_weights("LibreYOLO9t.pt", entry=_entry(), untrained_hint=HINT)
    monkeypatch.setenv("HF_TOKEN", "hf_loopback")
    path = resolve_weights("LibreYOLO9t.pt", entry=_entry(), untrained_hint=HINT)
    assert path.read_bytes() == b"weights"


def test_unknown_size_is_reported_without_a_download(hub) -> None:
    from libreyolo_models import UnknownFamilyError

    with pytest.raises(UnknownFamilyError, match="no size 'q'"):
        LibreYOLO("LibreYOLO9q.pt")
    assert hub.requests == []
