"""Two GPUs, NCCL: spawn, collectives, CUDA_VISIBLE_DEVICES translation, SyncBatchNorm.

Run on a machine with two or more CUDA GPUs (skipped elsewhere by the root conftest).
NVLink multicast stays off (NCCL_NVLS_ENABLE=0) as the lent machines require.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest
import torch

import libreyolo_ddp as ddp

TESTS_DIR = Path(__file__).resolve().parent
NCCL_ENV = {"NCCL_NVLS_ENABLE": "0", "OMP_NUM_THREADS": "1"}

pytestmark = [pytest.mark.multigpu, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def targets():
    if str(TESTS_DIR) not in sys.path:
        sys.path.insert(0, str(TESTS_DIR))  # spawn hands sys.path to its workers
    return importlib.import_module("ddp_spawn_targets")


def _uuids() -> list[str]:
    """Each visible GPU's UUID as this process numbers them (initializes CUDA here)."""
    out = []
    for index in range(torch.cuda.device_count()):
        uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
        out.append("" if uuid is None else str(uuid))
    return out


def test_nccl_spawn_puts_each_rank_on_its_gpu_and_runs_collectives(targets):
    uuids = _uuids()
    expected_visible = ddp.translate_visible_devices((0, 1), os.environ.get("CUDA_VISIBLE_DEVICES"))
    result = ddp.spawn(targets.nccl_facts, (uuids[:2],), devices=ddp.parse_devices("0,1"), env=NCCL_ENV)
    gathered = result["gathered"]
    assert [f["rank"] for f in gathered] == [0, 1]
    for rank, facts in enumerate(gathered):
        assert facts["backend"] == "nccl"
        assert facts["device"] == f"cuda:{rank}" and facts["current_device"] == rank
        assert facts["visible"] == expected_visible and facts["device_count"] == 2
        assert facts["sum"] == 3.0 and facts["sum_device"] == f"cuda:{rank}"
        assert facts["mean"] == 1.5
        assert facts["cpu_sum"] == 2.0  # a CPU tensor takes the round trip through the GPU
        assert facts["broadcast"] == "from rank 0"
        if uuids[rank]:
            assert facts["uuid"] == uuids[rank]


def test_user_visible_devices_are_translated_so_rank_zero_gets_the_named_gpu(targets, monkeypatch):
    uuids = _uuids()  # CUDA is initialized in this process before the variable changes
    if not all(uuids[:2]):
        pytest.skip(f"torch {torch.__version__} exposes no device UUIDs to tell GPUs apart")
    original = os.environ.get("CUDA_VISIBLE_DEVICES")
    swapped = ddp.translate_visible_devices((1, 0), original)  # the user's "0" is now our GPU 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", swapped)
    result = ddp.spawn(targets.nccl_facts, ([],), devices=ddp.parse_devices("0,1"), env=NCCL_ENV)
    gathered = result["gathered"]
    assert [f["visible"] for f in gathered] == [swapped, swapped]
    assert gathered[0]["uuid"] == uuids[1]
    assert gathered[1]["uuid"] == uuids[0]


def test_syncbn_on_two_gpus_matches_one_gpu_at_the_full_batch(targets):
    result = ddp.spawn(targets.nccl_syncbn, devices=ddp.parse_devices("0,1"), env=NCCL_ENV)
    for gaps in result["gathered"]:
        assert gaps["sync_bn_types"] == ["SyncBatchNorm"]  # torch's fused CUDA layer
        assert gaps["sync_grad_gap"] < 1e-4
        assert gaps["sync_stat_gap"] < 1e-5
        assert gaps["plain_grad_gap"] > 1e-4  # without sync, the documented difference


def test_crash_on_one_gpu_rank_reaches_the_parent_and_stops_the_other(targets):
    with pytest.raises(ddp.WorkerError) as info:
        ddp.spawn(targets.crash_on_rank_one, devices=ddp.parse_devices("0,1"), env=NCCL_ENV)
    assert info.value.rank == 1
    assert "rank one exploded" in str(info.value)
