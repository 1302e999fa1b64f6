"""spawn() with real Gloo worker processes on CPU: results, failures, re-entry, no orphans.

Each test starts fresh Python processes that import torch (seconds each), so they are
few, each covers several facts, and all are marked slow.
"""

from __future__ import annotations

import importlib
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

import libreyolo_ddp as ddp
from libreyolo_ddp import DevicePlan, WorkerError

TESTS_DIR = Path(__file__).resolve().parent
REENTRY_TAIL = (
    " was called from inside a spawned subprocess. This usually means your script calls "
    "model.train(device=...) at the top level without a 'if __name__ == \"__main__\":' guard."
)
WORKER_ENV = {"OMP_NUM_THREADS": "1"}

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]


@pytest.fixture(scope="module")
def targets():
    """The worker functions, imported by a plain module name the spawned workers can import too."""
    if str(TESTS_DIR) not in sys.path:
        sys.path.insert(0, str(TESTS_DIR))  # spawn hands sys.path to its workers
    return importlib.import_module("ddp_spawn_targets")


def _process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, state) for every process, from /proc (psutil is not a dependency)."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited while we looked
        fields = stat[stat.rindex(")") + 2:].split()
        table[int(entry.name)] = (int(fields[1]), fields[0])
    return table


def _spawned_workers_of(pid: int) -> list[int]:
    """Children of ``pid`` that are (or were: zombies) multiprocessing spawn workers."""
    found = []
    for child, (ppid, state) in _process_table().items():
        if ppid != pid:
            continue
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if state == "Z" or b"spawn_main" in cmdline:
            found.append(child)
    return found


def _is_running(pid: int) -> bool:
    info = _process_table().get(pid)
    return info is not None and info[1] != "Z"


def test_spawn_runs_one_gloo_worker_per_rank_and_returns_rank_zero_value(targets, monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)  # must travel to the workers
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # each worker gets its share of the cores
    share = max(1, ddp.usable_cores() // 2)
    port_before = os.environ.get("MASTER_PORT")
    result = ddp.spawn(targets.collect_rank_facts, ("first",), devices=DevicePlan.cpu_workers(2),
                       env={"LIBREYOLO_TEST_EXTRA": "yes"})
    assert torch.equal(result["tensor"], torch.arange(3))  # rank 0's value, CPU tensor intact
    gathered = result["gathered"]
    assert [f["rank"] for f in gathered] == [0, 1]
    for rank, facts in enumerate(gathered):
        assert facts["tag"] == "first" and facts["threads"] == (str(share), share)
        assert (facts["local_rank"], facts["world_size"]) == (rank, 2)
        assert facts["is_spawned_child"] and not facts["is_torchrun"]
        assert facts["backend"] == "gloo" and facts["local_device"] == "cpu"
        assert facts["master_addr"] == "127.0.0.1" and facts["extra_env"] == "yes"
        assert facts["cudnn_benchmark"] is True
        assert (facts["sum"], facts["mean"]) == (3.0, 1.5)
        # Re-entry from inside a worker is refused, with the entry point's own name.
        assert facts["spawn_reentry"].startswith("libreyolo_ddp.spawn()" + REENTRY_TAIL)
        assert facts["default_reentry"].startswith("spawn_ddp_train()" + REENTRY_TAIL)
    assert "LIBREYOLO_DDP_SPAWNED_BY" not in os.environ  # the parent's environment is restored
    assert os.environ.get("MASTER_PORT") == port_before
    assert _spawned_workers_of(os.getpid()) == []


def test_workers_threads_are_a_share_of_the_cores_unless_the_user_set_them(monkeypatch):
    from libreyolo_ddp.launch import _shared_env

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cores = ddp.usable_cores()
    assert _shared_env(DevicePlan.cpu_workers(2), None)["OMP_NUM_THREADS"] == str(max(1, cores // 2))
    assert _shared_env(DevicePlan.cpu_workers(4 * cores), None)["OMP_NUM_THREADS"] == "1"
    assert _shared_env(DevicePlan.cpu_workers(2), {"OMP_NUM_THREADS": "3"})["OMP_NUM_THREADS"] == "3"
    monkeypatch.setenv("OMP_NUM_THREADS", "5")  # the user's own setting travels as it is
    assert "OMP_NUM_THREADS" not in _shared_env(DevicePlan.cpu_workers(2), None)


def test_crashing_worker_reaches_parent_fast_with_rank_and_traceback_and_leaves_no_process(targets):
    with pytest.raises(WorkerError) as info:
        ddp.spawn(targets.crash_on_rank_one, devices=DevicePlan.cpu_workers(2), env=WORKER_ENV)
    caught_at = time.time()
    err = info.value
    message = str(err)
    raised_at = float(re.search(r"exploded at t=([\d.]+)", message).group(1))
    assert caught_at - raised_at < 10.0, f"took {caught_at - raised_at:.1f} s to reach the parent"
    assert err.rank == 1
    assert message.startswith("worker rank 1 of 2 failed: ValueError: rank one exploded")
    assert "--- traceback from rank 1 ---" in message
    assert "crash_on_rank_one" in err.traceback_text and "raise ValueError" in err.traceback_text
    assert isinstance(err, RuntimeError)
    assert _spawned_workers_of(os.getpid()) == []  # rank 0, stuck in its barrier, was stopped and reaped


def _run_script(tmp_path: Path, body: str, *args: str) -> subprocess.Popen:
    script = tmp_path / "user_script.py"
    script.write_text(textwrap.dedent(body))
    env = {**os.environ, **WORKER_ENV}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID", "LIBREYOLO_DDP_SPAWNED_BY"):
        env.pop(name, None)
    return subprocess.Popen([sys.executable, str(script), *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_unguarded_script_fails_in_every_worker_with_the_guard_advice_and_no_hang(tmp_path):
    proc = _run_script(tmp_path, """\
        import libreyolo_ddp as ddp

        def work():
            return 1

        # No `if __name__ == "__main__":` guard: each spawned worker re-runs this line.
        ddp.spawn(work, devices=ddp.DevicePlan.cpu_workers(2))
        """)
    try:
        _, stderr = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode != 0
    assert "ReentryError: libreyolo_ddp.spawn()" + REENTRY_TAIL in stderr
    assert 'if __name__ == "__main__":' in stderr
    assert "WorkerError: worker rank" in stderr  # the parent reports and exits instead of hanging


def test_workers_exit_when_the_parent_is_killed(tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    proc = _run_script(tmp_path, f"""\
        import sys
        sys.path.insert(0, {str(TESTS_DIR)!r})
        import libreyolo_ddp as ddp
        import ddp_spawn_targets

        if __name__ == "__main__":
            ddp.spawn(ddp_spawn_targets.sleep_after_start, ({str(markers)!r},), devices=ddp.DevicePlan.cpu_workers(2))
        """)
    try:
        deadline = time.monotonic() + 300
        while len(list(markers.glob("rank*.pid"))) < 2:
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "workers did not start"
            time.sleep(0.2)
        workers = [int(p.read_text()) for p in markers.glob("rank*.pid")]
        assert all(_is_running(pid) for pid in workers)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        deadline = time.monotonic() + 10
        while any(_is_running(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        survivors = [pid for pid in workers if _is_running(pid)]
        for pid in survivors:
            os.kill(pid, signal.SIGKILL)  # clean up before failing
        assert survivors == [], "workers outlived their killed parent"
    finally:
        proc.kill()
        proc.communicate()
