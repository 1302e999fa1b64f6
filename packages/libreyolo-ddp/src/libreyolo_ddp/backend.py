"""Choosing a collective backend and bringing the process group up and down.

NCCL where CUDA and NCCL exist (the fast path between GPUs), Gloo everywhere else
(CPU runs, tests, machines without NCCL). The group timeout is three hours: long
enough that a slow validation or checkpoint write on rank 0 never kills a healthy run,
short enough that a truly hung job still ends the same day.
"""

from __future__ import annotations

import logging
import os
from datetime import timedelta
from typing import Literal

import torch
import torch.distributed as dist

from libreyolo_ddp.devices import DEVICE_TYPE_VAR
from libreyolo_ddp.env import RANK_VARS, WORLD_SIZE_VARS, DistEnv, dist_env
from libreyolo_ddp.errors import DDPError

log = logging.getLogger(__name__)

Backend = Literal["nccl", "gloo"]
DEFAULT_TIMEOUT_S: float = 3 * 3600.0


def choose_backend(device_type: str | None = None) -> Backend:
    """"nccl" when training on CUDA and NCCL is built in, else "gloo".

    Args:
        device_type: the plan's device type; "cpu"/"mps" always get Gloo (NCCL moves
            only CUDA tensors). None means "CUDA if this machine has it".
    """
    wants_cuda = device_type in (None, "cuda") and torch.cuda.is_available()
    if wants_cuda and dist.is_available() and dist.is_nccl_available():
        return "nccl"
    return "gloo"


def _is_launched() -> bool:
    has_rank = any(os.environ.get(n) for n in RANK_VARS)
    has_world = any(os.environ.get(n) for n in WORLD_SIZE_VARS)
    return has_rank and has_world


def init_distributed(backend: Backend | None = None, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> DistEnv:
    """Join the process group described by the environment (torchrun or spawn).

    Idempotent: with a group already initialized, or without any launcher variables
    (a plain single-process run), nothing happens and the current :class:`DistEnv`
    is returned, so callers need no branch. On NCCL the current CUDA device is set to
    ``LOCAL_RANK`` first, so every later collective and ``.cuda()`` lands on this
    rank's GPU.

    Args:
        backend: "nccl" or "gloo"; default :func:`choose_backend` for the device type
            spawn() recorded (or CUDA when present).
        timeout_s: how long a collective may wait for the other ranks.

    Returns:
        This process's :class:`DistEnv` after joining.

    Raises:
        DDPError: distributed support is missing from this torch build, the rendezvous
            variables are incomplete, or ``LOCAL_RANK`` has no GPU.
    """
    if not dist.is_available():
        raise DDPError(f"torch {torch.__version__} was built without torch.distributed; install a build that has it")
    env = dist_env()
    if dist.is_initialized():
        return env
    if not _is_launched():
        log.debug("no launcher variables (RANK/WORLD_SIZE): single process, no process group")
        return env
    missing = [v for v in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(v)]
    if missing:
        raise DDPError(
            f"rank {env.rank}: {', '.join(missing)} not set, so the ranks cannot find each other; "
            f"launch with torchrun (which sets them) or export MASTER_ADDR=127.0.0.1 MASTER_PORT=29500"
        )
    backend = backend or choose_backend(os.environ.get(DEVICE_TYPE_VAR))
    if backend == "nccl":
        count = torch.cuda.device_count()
        if env.local_rank >= count:
            raise DDPError(
                f"rank {env.rank}: LOCAL_RANK={env.local_rank} but only {count} CUDA device(s) are visible; "
                f"start at most {count} processes per machine (torchrun --nproc_per_node={count})"
            )
        torch.cuda.set_device(env.local_rank)
    # NCCL: naming the device creates the communicator now rather than at the first collective, so
    # a CUDA graph that records collectives (SyncBatchNorm's) never captures a lazy init.
    device = torch.device("cuda", env.local_rank) if backend == "nccl" else None
    dist.init_process_group(
        backend, rank=env.rank, world_size=env.world_size, timeout=timedelta(seconds=timeout_s), device_id=device
    )
    log.info(
        "process group ready: backend=%s rank %d/%d local_rank %d timeout %.0f s",
        backend, env.rank, env.world_size, env.local_rank, timeout_s,
    )
    return dist_env()


def destroy_distributed() -> None:
    """Leave and free the process group; a no-op when there is none."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
