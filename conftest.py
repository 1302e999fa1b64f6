"""Repository-wide pytest setup: GPU markers skip cleanly, with the reason, where no GPU is."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


def _cuda_device_count() -> int:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a hard dependency of every package
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, give each worker its share of the cores: two workers each running
    torch with every core would oversubscribe a small CI machine and slow both down."""
    import os

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if workers > 1:
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wants_gpu = [i for i in items if "cuda" in i.keywords or "multigpu" in i.keywords]
    if not wants_gpu:
        return
    count = _cuda_device_count()
    skip_cuda = pytest.mark.skip(reason="needs a CUDA GPU (marker 'cuda'); none is visible here")
    skip_multi = pytest.mark.skip(reason=f"needs two or more CUDA GPUs (marker 'multigpu'); {count} visible")
    for item in wants_gpu:
        if "multigpu" in item.keywords and count < 2:
            item.add_marker(skip_multi)
        elif "cuda" in item.keywords and count < 1:
            item.add_marker(skip_cuda)


@pytest.fixture(autouse=True)
def _no_network_and_private_folders(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never touch the network or the user's folders.

    The hub points at a closed loopback port (tests that exercise downloads start their own
    loopback server and override this); weights and caches go to per-session temp folders,
    RAM image caches included (they would otherwise pile up in the machine's /dev/shm).
    """
    base = tmp_path_factory.getbasetemp()
    monkeypatch.setenv("LIBREYOLO_HUB_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("LIBREYOLO_WEIGHTS_DIR", str(base / "weights"))
    monkeypatch.setenv("LIBREYOLO_CACHE_DIR", str(base / "cache"))
    (base / "shm").mkdir(exist_ok=True)
    monkeypatch.setenv("LIBREYOLO_SHM_DIR", str(base / "shm"))


@pytest.fixture(autouse=True)
def _dataloader_errors_stay_with_their_loader() -> Iterator[None]:
    """Put SIGCHLD back to the default after each test.

    The first multi-worker DataLoader of a process installs a SIGCHLD handler that raises
    "DataLoader worker ... exited unexpectedly" from the main thread at whatever point the next
    child process exits, for as long as any still-registered worker is dead (checked: kill one
    worker of a live iterator, and the next ``subprocess.run`` of anything raises). In a
    pytest-xdist worker, a loader left behind by one test can then raise inside pytest's own code
    during a later test that starts a process, which kills the xdist worker ("node down"): the
    crashes CI saw under the tests marked ``solo``. Without the handler a dead worker is still
    reported, by its own iterator, when it is next read.
    """
    yield
    import signal

    handler = signal.getsignal(signal.SIGCHLD)
    if callable(handler) and getattr(handler, "__module__", "").startswith("torch.utils.data"):
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
