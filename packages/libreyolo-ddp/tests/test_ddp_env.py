"""Rank/world from the environment, torchrun detection, and package independence from YOLO."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import libreyolo_ddp as ddp
from libreyolo_ddp import DDPError, DistEnv

TORCHRUN_ENV = {
    "RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "abc",
}


def test_plain_process_is_rank_zero_of_one():
    env = ddp.dist_env({})
    assert env == DistEnv(rank=0, local_rank=0, world_size=1, is_torchrun=False)
    assert env.is_rank_zero and not env.is_distributed


def test_torchrun_variables_give_rank_local_rank_world_and_torchrun():
    env = ddp.dist_env(TORCHRUN_ENV)
    assert env == DistEnv(rank=3, local_rank=1, world_size=4, is_torchrun=True)
    assert env.is_distributed and not env.is_rank_zero


def test_first_variable_in_the_documented_order_wins():
    env = ddp.dist_env({"RANK": "1", "OMPI_COMM_WORLD_RANK": "5", "WORLD_SIZE": "2", "OMPI_COMM_WORLD_SIZE": "8"})
    assert (env.rank, env.world_size) == (1, 2)
    mpi = ddp.dist_env({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "1"})
    assert (mpi.rank, mpi.local_rank, mpi.world_size) == (5, 1, 8)


def test_missing_local_rank_falls_back_to_the_global_rank():
    assert ddp.dist_env({"RANK": "2", "WORLD_SIZE": "3"}).local_rank == 2


def test_is_torchrun_needs_torchelastic_or_rank_and_world():
    assert ddp.is_torchrun(TORCHRUN_ENV)
    assert ddp.is_torchrun({"TORCHELASTIC_RUN_ID": "x"})
    assert ddp.is_torchrun({"RANK": "0", "WORLD_SIZE": "2"})  # torch.distributed.launch / manual env protocol
    assert not ddp.is_torchrun({"RANK": "0"})
    assert not ddp.is_torchrun({"LOCAL_RANK": "0"})
    assert not ddp.is_torchrun({})


def test_workers_of_our_own_spawn_are_not_torchrun():
    env = {**TORCHRUN_ENV, "LIBREYOLO_DDP_SPAWNED_BY": "1234"}
    assert not ddp.is_torchrun(env)
    assert ddp.is_spawned_child(env)
    assert not ddp.dist_env(env).is_torchrun


@pytest.mark.parametrize(
    ("environ", "fragment"),
    [
        ({"RANK": "one", "WORLD_SIZE": "2"}, "RANK='one'"),
        ({"RANK": "2", "WORLD_SIZE": "2"}, "rank=2 and world_size=2"),
        ({"RANK": "0", "WORLD_SIZE": "0"}, "world_size=0"),
    ],
)
def test_inconsistent_environment_is_an_error_naming_the_values(environ, fragment):
    with pytest.raises(DDPError, match=fragment):
        ddp.dist_env(environ)


def test_without_a_process_group_the_real_environment_is_read(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID", "LIBREYOLO_DDP_SPAWNED_BY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert ddp.dist_env() == DistEnv(rank=1, local_rank=1, world_size=2, is_torchrun=True)
    assert not ddp.is_rank_zero()


def test_init_distributed_is_a_no_op_without_launcher_variables(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert ddp.init_distributed() == DistEnv()
    assert not ddp.is_dist_initialized()


def test_init_distributed_names_missing_rendezvous_variables(monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    with pytest.raises(DDPError, match="MASTER_ADDR, MASTER_PORT not set"):
        ddp.init_distributed("gloo")
    assert not ddp.is_dist_initialized()


@pytest.mark.slow
def test_importing_the_package_does_not_load_the_model_zoo():
    code = (
        "import sys, libreyolo_ddp;"
        "bad = [m for m in sys.modules if m.startswith(('libreyolo_models', 'libreyolo_cli', 'libreyolo.'))];"
        "print(bad)"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_public_api_the_trainer_wires_in_is_exported():
    names = """parse_devices DevicePlan DistEnv dist_env is_torchrun choose_backend init_distributed
        destroy_distributed spawn launch check_picklable ensure_not_spawned_child split_global_batch
        resolve_autobatch probe_batch_size convert_sync_batchnorm is_rank_zero rank_zero_only barrier
        broadcast_object resolve_on_rank_zero all_reduce_sum all_reduce_mean gather_to_rank_zero
        seed_for_rank seed_everything build_dataloader set_loader_epoch shard_range configure_rank_logging
        local_device translate_visible_devices DDPError BatchSplitError PicklingGuardError ReentryError
        WorkerError DeviceError AutobatchError""".split()
    missing = [n for n in names if n not in ddp.__all__ or not hasattr(ddp, n)]
    assert missing == []
    assert issubclass(ddp.BatchSplitError, ValueError) and issubclass(ddp.PicklingGuardError, ValueError)
    assert issubclass(ddp.WorkerError, RuntimeError) and issubclass(ddp.DDPError, Exception)


def test_elastic_run_reads_the_job_id_and_restart_count() -> None:
    from libreyolo_ddp import DDPError, ElasticRun, elastic_run

    assert elastic_run({}) is None  # not torchrun
    first = elastic_run({"TORCHELASTIC_RUN_ID": "job7", "RANK": "0", "WORLD_SIZE": "2"})
    assert first == ElasticRun("job7", 0) and not first.is_restart
    again = elastic_run({"TORCHELASTIC_RUN_ID": "job7", "TORCHELASTIC_RESTART_COUNT": "2"})
    assert again == ElasticRun("job7", 2) and again.is_restart
    spawned = {"TORCHELASTIC_RUN_ID": "job7", "LIBREYOLO_DDP_SPAWNED_BY": "123"}
    assert elastic_run(spawned) is None  # our own spawn's workers are not a torchrun job
    with pytest.raises(DDPError, match="TORCHELASTIC_RESTART_COUNT='x' is not an integer"):
        elastic_run({"TORCHELASTIC_RUN_ID": "job7", "TORCHELASTIC_RESTART_COUNT": "x"})


def test_a_group_that_cannot_form_after_a_torchrun_restart_names_the_fix(monkeypatch) -> None:
    import importlib

    launch_module = importlib.import_module("libreyolo_ddp.launch")  # the module, not the function

    def refuse(*args: object, **kwargs: object) -> None:
        raise RuntimeError("Gloo connectFullMesh failed ... Connection refused")

    monkeypatch.setattr(launch_module, "init_distributed", refuse)
    monkeypatch.delenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", raising=False)
    for key, value in {"TORCHELASTIC_RUN_ID": "job9", "TORCHELASTIC_RESTART_COUNT": "1", "RANK": "0",
                       "WORLD_SIZE": "2", "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(DDPError, match=r"restart 1 of job 'job9'.*connectFullMesh.*TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1"):
        ddp.launch(print, (), devices=ddp.DevicePlan("cpu"))
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")  # a first attempt: torch's own error, unchanged
    with pytest.raises(RuntimeError, match="connectFullMesh"):
        ddp.launch(print, (), devices=ddp.DevicePlan("cpu"))
