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
    """Under pytest-xdist, schedule by work stealing and give each worker its share of the cores:
    two workers each running torch with every core would oversubscribe a small CI machine."""
    import importlib.util
    import os

    if importlib.util.find_spec("tensorflow") is not None:
        # TensorFlow (the [tflite] extra; TensorBoard imports it too when present) loaded before
        # Triton (bundled with CUDA torch) aborts the process at Triton's import; loading Triton
        # first is safe. Tests import both in any order, so every test process starts with it (as
        # libreyolo_models.optional.preload_triton does; not imported here: some tests check that
        # the zoo is not loaded).
        try:
            import triton  # noqa: F401
        except ImportError:
            pass
    if getattr(config.option, "dist", "no") == "load":  # what -n means by default
        # An idle worker takes half of another's queue (with _heavy_modules_first: the long tests
        # start at once, and no worker runs the last of them alone while the other idles).
        config.option.dist = "worksteal"
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if workers > 1:
        import torch

        from libreyolo_ddp import usable_cores

        # The cores this process may run on (a CI container's affinity mask), not the host's count:
        # on a 64-core host lent 2 cores, os.cpu_count() gave each worker 32 threads on 1 core.
        torch.set_num_threads(max(1, usable_cores() // workers))


def _heavy_modules_first(items: list[pytest.Item]) -> None:
    """Under pytest-xdist, run modules holding learning tests first, then modules holding slow
    tests, then the rest (each module's tests kept together and in order, so module fixtures are
    built once). Under work stealing (``pytest_configure``) the first worker starts on the
    minutes-long tests at once and the other takes over the rest of its queue as it runs dry, so
    no worker is left running a long test alone at the end while the other idles."""
    rank: dict[str, int] = {}
    for item in items:
        weight = 0 if "learning" in item.keywords else 1 if "slow" in item.keywords else 2
        rank[item.nodeid.split("::")[0]] = min(weight, rank.get(item.nodeid.split("::")[0], 2))
    order = {id(item): i for i, item in enumerate(items)}
    items.sort(key=lambda item: (rank[item.nodeid.split("::")[0]], order[id(item)]))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import os

    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0) > 1:
        _heavy_modules_first(items)
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
