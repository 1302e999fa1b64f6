"""Two processes started with torchrun's environment (Gloo, CPU): every multi-rank behaviour.

The processes run ddp_torchrun_checks.py once for the whole module (torch import costs
seconds per process); each test below asserts one behaviour from the ranks' reports.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import libreyolo_ddp as ddp

TESTS_DIR = Path(__file__).resolve().parent
DATASET_SIZE = 23
RUN_TIMEOUT_S = 400

pytestmark = [pytest.mark.slow, pytest.mark.timeout(RUN_TIMEOUT_S + 60)]


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> list[dict]:
    out_dir = tmp_path_factory.mktemp("torchrun")
    port = str(ddp.find_free_port())
    base = {k: v for k, v in os.environ.items() if k != "LIBREYOLO_DDP_SPAWNED_BY"}
    procs = []
    for rank in range(2):
        env = {**base, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "TORCHELASTIC_RUN_ID": "simulated",
               "OMP_NUM_THREADS": "1"}
        procs.append(subprocess.Popen(
            [sys.executable, str(TESTS_DIR / "ddp_torchrun_checks.py"), str(out_dir)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        ))
    logs = []
    try:
        for proc in procs:
            logs.append(proc.communicate(timeout=RUN_TIMEOUT_S)[0])
    finally:
        for proc in procs:
            proc.kill()
            proc.communicate()
    for rank, proc in enumerate(procs):
        assert proc.returncode == 0, f"rank {rank} failed:\n{logs[rank]}"
    return [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(2)]


def test_torchrun_environment_is_detected_and_joined(reports):
    for rank, report in enumerate(reports):
        assert report["is_torchrun"]
        assert report["env_before_init"] == [rank, rank, 2, True]
        assert report["backend"] == "gloo"
        assert report["initialized_again"]  # init_distributed is idempotent
        assert report["launch"] == [True, rank]  # launch() ran fn in this process, spawned nothing
        assert report["initialized_after_destroy"] is False


def test_autobatch_probes_on_rank_zero_only_and_every_rank_gets_its_value(reports):
    assert [r["probe_calls"] for r in reports] == [1, 0]
    # rank 0 probed 40/GPU: 40 x 2 = 80, capped at nbs=64. Rank 1's probe would have said 1000.
    assert [r["autobatch"] for r in reports] == [64, 64]


def test_run_directory_is_resolved_once_and_shared(reports):
    run_dirs = {r["run_dir"] for r in reports}
    assert len(run_dirs) == 1
    run_dir = Path(run_dirs.pop())
    assert run_dir.name == "exp1" and sorted(p.name for p in run_dir.parent.iterdir()) == ["exp1"]


def test_failure_on_rank_zero_while_resolving_releases_the_other_ranks(reports):
    assert reports[0]["resolve_failure"] == "ZeroDivisionError"
    assert reports[1]["resolve_failure"].startswith("DDPError: rank 1: rank 0 failed")
    assert "ZeroDivisionError: division by zero" in reports[1]["resolve_failure"]


def test_per_rank_seeds_are_derived_distinct_and_change_the_draws(reports):
    assert [r["seed"] for r in reports] == [ddp.seed_for_rank(123, 0), ddp.seed_for_rank(123, 1)]
    assert reports[0]["seed"] != reports[1]["seed"]
    assert reports[0]["draw"] != reports[1]["draw"]


def test_collectives_sum_average_without_avg_op_gather_and_broadcast(reports):
    for report in reports:
        assert report["sum"] == 3.0
        assert report["mean_of_ints"] == 1.5  # Gloo has no AVG: summed and divided, ints become floats
        assert report["max"] == 1.0
        assert report["broadcast"] == {"run": "exp"}
    assert reports[0]["gathered"] == [{"rank": 0}, {"rank": 1}]
    assert reports[1]["gathered"] is None


@pytest.mark.parametrize("key", ["train", "persistent"])
def test_training_loader_gives_disjoint_shards_and_equal_step_counts(reports, key):
    for report in reports:
        assert report["train_sampler"] == "DistributedSampler"
    for epoch in range(2):
        per_rank = [r[key][epoch] for r in reports]
        assert per_rank[0]["steps"] == per_rank[1]["steps"] == (DATASET_SIZE // 2) // 4
        assert not set(per_rank[0]["items"]) & set(per_rank[1]["items"])
    for report in reports:
        assert report[key][0]["items"] != report[key][1]["items"]  # set_loader_epoch reshuffled


def test_persistent_workers_survive_the_epoch_boundary(reports):
    for report in reports:
        assert report["persistent_workers"] is True
        assert [len(e["items"]) for e in report["persistent"]] == [8, 8]  # two full epochs, no hang
    # The same seed gives the same shard order whether or not workers load the batches.
    assert [r["persistent"][0]["items"] for r in reports] == [r["train"][0]["items"] for r in reports]


def test_validation_shards_cover_every_item_exactly_once(reports):
    items = reports[0]["val"]["items"] + reports[1]["val"]["items"]
    assert items == list(range(DATASET_SIZE))


def test_syncbn_two_ranks_at_half_batch_match_one_rank_at_full_batch(reports):
    for report in reports:
        gaps = report["syncbn"]
        assert gaps["sync_bn_types"] == ["PortableSyncBatchNorm"]
        assert gaps["sync_grad_gap"] < 1e-5
        assert gaps["sync_stat_gap"] < 1e-6


def test_without_syncbn_only_the_documented_difference_remains(reports):
    # Per-rank statistics over 4 images instead of 8: gradients and running stats differ.
    for report in reports:
        gaps = report["syncbn"]
        assert gaps["plain_bn_types"] == ["BatchNorm2d"]
        assert gaps["plain_grad_gap"] > 1e-4
        assert gaps["plain_stat_gap"] > 1e-4
