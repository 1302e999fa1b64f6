"""A training run killed with SIGKILL mid-epoch resumes from last.pt; best.pt survives intact."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).parent


def _epochs_done(results: Path) -> int:
    if not results.is_file():
        return 0
    with results.open() as fh:
        return len(list(csv.DictReader(fh)))


@pytest.mark.slow
def test_sigkill_mid_epoch_then_resume(tmp_path: Path, mini_shapes: Path) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1", LIBREYOLO_HUB_URL="http://127.0.0.1:9")
    script = [sys.executable, str(HERE / "resume_kill_script.py"), str(tmp_path / "runs"), str(mini_shapes)]
    proc = subprocess.Popen(script, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    results = tmp_path / "runs" / "exp" / "results.csv"
    deadline = time.monotonic() + 600
    while _epochs_done(results) < 1 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert proc.poll() is None, "training ended before it could be killed"
    time.sleep(0.5)  # into epoch 2
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    weights = tmp_path / "runs" / "exp" / "weights"
    best = torch.load(weights / "best.pt", weights_only=True)  # loads: never half-written
    last = torch.load(weights / "last.pt", weights_only=True)
    assert last["epoch"] in (0, 1) and best["model_family"] == "yolo9"
    stale = weights / ".last.pt.k2j3h4x.tmp"  # what a SIGKILL during a checkpoint write leaves
    stale.write_bytes(b"half a checkpoint")
    done = subprocess.run([*script, "--resume"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _epochs_done(results) == 3
    assert torch.load(weights / "last.pt", weights_only=True)["epoch"] == 2
    assert sorted(p.name for p in weights.iterdir()) == ["best.pt", "last.pt"]  # the resume removed the temp
