"""One rank of a simulated torchrun job: run every multi-rank check once, write a JSON report.

Started twice by test_ddp_torchrun_env.py with the variables torchrun sets (RANK,
LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RUN_ID). One pair of
processes covers many assertions because each Python process pays seconds of torch
import. Usage: python ddp_torchrun_checks.py OUT_DIR
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from ddp_spawn_targets import syncbn_gaps
from torch.utils.data import TensorDataset

import libreyolo_ddp as ddp

DATASET_SIZE = 23  # odd on purpose: the ranks' shards cannot be equal without dropping or padding


def _epochs(loader, epochs: int) -> list[dict]:
    out = []
    for epoch in range(epochs):
        ddp.set_loader_epoch(loader, epoch)
        started = time.monotonic()
        batches = [b[0].tolist() for b in loader]
        out.append({"steps": len(batches), "items": [i for b in batches for i in b],
                    "seconds": time.monotonic() - started})
        ddp.barrier()
    return out


def _whoami(parent_pid: int) -> list:
    return [os.getpid() == parent_pid, ddp.dist_env().rank]


def _make_run_dir(root: Path) -> str:
    index = 1
    while (root / f"exp{index}").exists():
        index += 1
    path = root / f"exp{index}"
    path.mkdir(parents=True)
    return str(path)


def _resolve_failure() -> str:
    try:
        ddp.resolve_on_rank_zero(lambda: 1 / 0)
    except ZeroDivisionError:
        return "ZeroDivisionError"
    except ddp.DDPError as err:
        return f"DDPError: {err}"
    return "no error"


def main(out_dir: Path) -> None:
    torch.set_num_threads(1)
    report: dict = {"is_torchrun": ddp.is_torchrun()}
    before = ddp.dist_env()
    report["env_before_init"] = [before.rank, before.local_rank, before.world_size, before.is_torchrun]
    env = ddp.init_distributed()
    report["backend"] = str(dist.get_backend())
    report["initialized_again"] = ddp.init_distributed() == env  # idempotent
    # Under torchrun, launch() spawns nothing: fn runs right here, in every rank's process.
    report["launch"] = ddp.launch(_whoami, (os.getpid(),), devices=ddp.DevicePlan.cpu_workers(2))

    probe_calls: list[int] = []

    def probe() -> int:
        probe_calls.append(env.rank)
        return 40 if env.rank == 0 else 1000  # a rank that probed would disagree
    report["autobatch"] = ddp.resolve_autobatch(probe, world_size=env.world_size, nbs=64)
    report["probe_calls"] = len(probe_calls)

    report["run_dir"] = ddp.resolve_on_rank_zero(lambda: _make_run_dir(out_dir / "runs"))
    report["resolve_failure"] = _resolve_failure()

    report["seed"] = ddp.seed_everything(123)
    report["draw"] = torch.rand(4).tolist()

    report["sum"] = ddp.all_reduce_sum(torch.tensor([env.rank + 1.0])).item()
    report["mean_of_ints"] = ddp.all_reduce_mean(torch.tensor([env.rank + 1])).item()
    report["max"] = ddp.all_reduce_max(torch.tensor([float(env.rank)])).item()
    report["gathered"] = ddp.gather_to_rank_zero({"rank": env.rank})
    report["broadcast"] = ddp.broadcast_object({"run": "exp"} if env.rank == 0 else None)

    data = TensorDataset(torch.arange(DATASET_SIZE))
    train = ddp.build_dataloader(data, batch_size=4, shuffle=True, workers=0, seed=7)
    report["train_sampler"] = type(train.sampler).__name__
    report["train"] = _epochs(train, 2)
    persistent = ddp.build_dataloader(data, batch_size=4, shuffle=True, workers=2, seed=7)
    report["persistent_workers"] = persistent.persistent_workers
    report["persistent"] = _epochs(persistent, 2)
    val = ddp.build_dataloader(data, batch_size=4, shuffle=False, workers=0, seed=7, shard="range", drop_last=False)
    report["val"] = _epochs(val, 1)[0]

    report["syncbn"] = syncbn_gaps(torch.device("cpu"))

    ddp.barrier()
    ddp.destroy_distributed()
    report["initialized_after_destroy"] = ddp.is_dist_initialized()
    (out_dir / f"rank{env.rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
