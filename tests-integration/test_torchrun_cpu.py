"""``torchrun --nproc_per_node=2`` trains YOLOv9-t on CPU (Gloo): same weights on every rank,
files written by rank 0 only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).parent


@pytest.mark.slow
def test_torchrun_two_cpu_ranks_train_one_epoch(tmp_path: Path, mini_shapes: Path) -> None:
    from libreyolo_ddp import find_free_port

    env = dict(os.environ, OMP_NUM_THREADS="1", LIBREYOLO_HUB_URL="http://127.0.0.1:9")
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={find_free_port()}",
         str(HERE / "torchrun_train_script.py"), str(tmp_path), str(mini_shapes)],
        capture_output=True, text=True, timeout=900, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    assert torch.equal(ranks[0]["params"], ranks[1]["params"])  # DDP kept the replicas identical
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert runs == ["exp"]  # rank 1 did not create a run folder of its own
    run = tmp_path / "runs" / "exp"
    assert ranks[0]["run_dir"] == ranks[1]["run_dir"] == str(run)
    assert sorted(p.name for p in (run / "weights").iterdir()) == ["best.pt", "last.pt"]
    ckpt = torch.load(run / "weights" / "last.pt", weights_only=True)
    assert ckpt["world_size"] == 2 and ckpt["global_batch"] == 8

    # Resume that 2-rank run in one process: the global batch (8) is kept, now 8 on the one rank.
    from libreyolo_models import LibreYOLO

    resumed = LibreYOLO(run / "weights" / "last.pt").train(resume=True, epochs=2, device="cpu", workers=0)
    after = torch.load(resumed.last, weights_only=True)
    assert after["epoch"] == 1 and after["world_size"] == 1 and after["global_batch"] == 8
