"""Weights by name: local path, weights folder, then a real HTTP download (from a loopback server)."""

from __future__ import annotations

import hashlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from libreyolo_models import LibreYOLO, LibreYOLO9, WeightsNotFoundError
from libreyolo_models.hub import hub_url
from libreyolo_models.registry import get_family


class _Handler(http.server.BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}
    digest_of: dict[str, bytes] = {}  # serve another file's digest (a file changed on the hub)
    requests: list[str] = []
    truncate: bool = False

    def do_GET(self) -> None:  # noqa: N802 - http.server API
        self.requests.append(self.path)
        body = self.files.get(self.path)
        if body is None:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", f'"{hashlib.sha256(self.digest_of.get(self.path, body)).hexdigest()}"')
        self.end_headers()
        self.wfile.write(body[: len(body) // 2] if self.truncate else body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[type[_Handler]]:
    handler = type("Handler", (_Handler,), {"files": {}, "digest_of": {}, "requests": [], "truncate": False})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("LIBREYOLO_HUB_URL", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("LIBREYOLO_WEIGHTS_DIR", str(tmp_path / "weights"))
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


def test_hub_url_follows_upstream_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LIBREYOLO_HUB_URL")
    entry = get_family("yolo9").weights_entry("t")
    assert hub_url(entry.url) == "https://huggingface.co/LibreYOLO/LibreYOLO9t/resolve/main/LibreYOLO9t.pt"


def test_bare_name_downloads_from_the_hub_into_the_weights_folder(hub, checkpoint_bytes, tmp_path) -> None:
    hub.files["/LibreYOLO/LibreYOLO9t/resolve/main/LibreYOLO9t.pt"] = checkpoint_bytes
    model = LibreYOLO("LibreYOLO9t.pt")
    assert model.spec.name == "yolo9" and model.size == "t"
    assert model.net.head.cv3[0][2].bias[0].item() == pytest.approx(0.123)
    assert (tmp_path / "weights" / "LibreYOLO9t.pt").read_bytes() == checkpoint_bytes
    # Second time: found in the weights folder, no request.
    LibreYOLO("LibreYOLO9t.pt")
    assert len(hub.requests) == 1


def test_local_path_wins_over_weights_folder_and_hub(hub, checkpoint_bytes, tmp_path) -> None:
    (tmp_path / "LibreYOLO9t.pt").write_bytes(checkpoint_bytes)
    LibreYOLO("LibreYOLO9t.pt")
    assert hub.requests == []


def test_missing_on_hub_says_where_it_looked_and_how_to_build_untrained(hub) -> None:
    with pytest.raises(WeightsNotFoundError) as err:
        LibreYOLO("LibreYOLO9s.pt")
    text = str(err.value)
    assert "LibreYOLO9s.pt" in text and "weights" in text and "HTTP 404" in text
    assert "LibreYOLO('LibreYOLO9s.yaml')" in text and "LibreYOLO(family='yolo9', size='s'" in text


def test_offline_error_names_the_url_and_leaves_no_partial_file(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("LIBREYOLO_WEIGHTS_DIR", str(tmp_path / "w"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(WeightsNotFoundError, match=r"127\.0\.0\.1:9.*offline or unreachable"):
        LibreYOLO("LibreYOLO9c.pt")
    assert not any((tmp_path / "w").glob("*")) if (tmp_path / "w").exists() else True


def test_a_failed_download_leaves_no_empty_weights_folders(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("LIBREYOLO_WEIGHTS_DIR", str(tmp_path / "a" / "b" / "weights"))
    with pytest.raises(WeightsNotFoundError):
        LibreYOLO("LibreYOLO9c.pt")
    assert list(tmp_path.iterdir()) == []  # not even tmp/a: every folder the download made is gone


def test_truncated_download_is_not_kept(hub, checkpoint_bytes, tmp_path) -> None:
    hub.files["/LibreYOLO/LibreYOLO9t/resolve/main/LibreYOLO9t.pt"] = checkpoint_bytes
    hub.truncate = True
    with pytest.raises(WeightsNotFoundError):
        LibreYOLO("LibreYOLO9t.pt")
    assert list((tmp_path / "weights").glob("*.pt")) == []


def test_a_download_whose_sha256_does_not_match_is_deleted_and_reported(hub, checkpoint_bytes, tmp_path) -> None:
    path = "/LibreYOLO/LibreYOLO9t/resolve/main/LibreYOLO9t.pt"
    hub.files[path] = checkpoint_bytes
    hub.digest_of[path] = b"another file"
    with pytest.raises(WeightsNotFoundError, match="sha256 mismatch.*deleted"):
        LibreYOLO("LibreYOLO9t.pt")
    assert list((tmp_path / "weights").glob("*")) == []


def test_unknown_size_is_reported_without_a_download(hub) -> None:
    from libreyolo_models import UnknownFamilyError

    with pytest.raises(UnknownFamilyError, match="no size 'q'"):
        LibreYOLO("LibreYOLO9q.pt")
    assert hub.requests == []
