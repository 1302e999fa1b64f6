"""Run a script as two gloo ranks in subprocesses and read what each wrote: the DDP data tests'
harness. Import as ``from gloo_ranks import run_two_ranks`` (the tests folder is on ``sys.path``).

The script gets ``rank``, a rendezvous file, the image folder and the output folder as its first
four arguments (then ``args``), joins ``init_process_group("gloo", init_method=f"file://{argv[2]}", ...)`` and writes
``rank<r>.json`` into the output folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def run_two_ranks(script: str, folder: Path, tmp_path: Path, *, args: tuple[str, ...] = (),
                  timeout_s: float = 240) -> list[dict[str, Any]]:
    """Both ranks' JSON, rank 0 first; a rank that fails fails the test with its output's tail."""
    path = tmp_path / "rank.py"
    path.write_text(script)
    env = {**os.environ, "LIBREYOLO_SHM_DIR": str(tmp_path / "shm"), "LIBREYOLO_CACHE_DIR": str(tmp_path / "cache")}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID"):
        env.pop(name, None)
    ranks = [subprocess.Popen([sys.executable, str(path), str(r), str(tmp_path / "rendezvous"), str(folder),
                               str(tmp_path), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for r in range(2)]
    for proc in ranks:
        output, _ = proc.communicate(timeout=timeout_s)
        assert proc.returncode == 0, output.decode(errors="replace")[-3000:]
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
