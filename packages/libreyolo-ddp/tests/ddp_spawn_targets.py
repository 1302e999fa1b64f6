"""Worker functions for the spawn tests.

Spawned workers import their target by module and name, and pytest's importlib mode
gives test modules names a fresh interpreter cannot import. The tests put this folder
on ``sys.path`` (which spawn hands to its workers) and import this module by its
plain name, so these functions unpickle in the workers.
"""

from __future__ import annotations

import copy
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.parallel import DistributedDataParallel

import libreyolo_ddp as ddp


def collect_rank_facts(tag: str) -> dict | None:
    """Everything a worker can observe about its own setup, gathered onto rank 0."""
    threads = (os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads())
    torch.set_num_threads(1)
    env = ddp.dist_env()
    facts: dict = {
        "tag": tag,
        "threads": threads,
        "rank": env.rank,
        "local_rank": env.local_rank,
        "world_size": env.world_size,
        "is_torchrun": ddp.is_torchrun(),
        "is_spawned_child": ddp.is_spawned_child(),
        "backend": str(dist.get_backend()),
        "local_device": str(ddp.local_device()),
        "master_addr": os.environ.get("MASTER_ADDR"),
        "extra_env": os.environ.get("LIBREYOLO_TEST_EXTRA"),
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "sum": ddp.all_reduce_sum(torch.tensor([env.rank + 1.0])).item(),
        "mean": ddp.all_reduce_mean(torch.tensor([env.rank + 1.0])).item(),
    }
    try:
        ddp.spawn(collect_rank_facts, ("nested",), devices=ddp.DevicePlan.cpu_workers(2))
    except ddp.ReentryError as err:
        facts["spawn_reentry"] = str(err)
    try:
        ddp.ensure_not_spawned_child()
    except ddp.ReentryError as err:
        facts["default_reentry"] = str(err)
    gathered = ddp.gather_to_rank_zero(facts)
    if env.rank == 0:
        return {"gathered": gathered, "tensor": torch.arange(3)}
    return None


def crash_on_rank_one() -> str:
    """Rank 1 raises while rank 0 waits in a barrier that can never complete."""
    if ddp.dist_env().rank == 1:
        raise ValueError(f"rank one exploded at t={time.time():.3f}")
    ddp.barrier()
    return "rank 0 should never get here"


def sleep_after_start(marker_dir: str) -> None:
    """Record this worker's pid, then idle (for the orphan test, which kills the parent)."""
    Path(marker_dir, f"rank{ddp.dist_env().rank}.pid").write_text(str(os.getpid()))
    time.sleep(300)


def nccl_facts(reference_uuids: list[str]) -> dict | None:
    """Multi-GPU: which physical GPU each rank landed on, and NCCL collectives on it."""
    env = ddp.dist_env()
    device = ddp.local_device()
    props = torch.cuda.get_device_properties(device)
    value = torch.tensor([env.rank + 1.0], device=device)
    facts = {
        "rank": env.rank,
        "backend": str(dist.get_backend()),
        "device": str(device),
        "current_device": torch.cuda.current_device(),
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "device_count": torch.cuda.device_count(),
        "uuid": str(getattr(props, "uuid", "")),
        "sum": ddp.all_reduce_sum(value).item(),
        "sum_device": str(ddp.all_reduce_sum(value).device),
        "mean": ddp.all_reduce_mean(value).item(),
        "cpu_sum": ddp.all_reduce_sum(torch.tensor([1.0])).item(),
        "broadcast": ddp.broadcast_object("from rank 0" if env.rank == 0 else None),
        "reference_uuids": reference_uuids,
    }
    ddp.barrier()
    gathered = ddp.gather_to_rank_zero(facts)
    return {"gathered": gathered} if env.rank == 0 else None


def _small_bn_net() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
        nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2),
    )


def syncbn_gaps(device: torch.device, global_batch: int = 8) -> dict:
    """Gradient and running-stat gaps between one process at the global batch and DDP ranks at slices.

    Every rank builds the same reference (one process, plain BatchNorm, whole batch) and
    then trains its slice under DDP, once with SyncBatchNorm and once without.
    """
    env = ddp.dist_env()
    torch.manual_seed(0)
    base = _small_bn_net().to(device)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(global_batch, 3, 6, 6, generator=gen).to(device)
    y = torch.randn(global_batch, 2, generator=gen).to(device)
    reference = copy.deepcopy(base)
    ((reference(x) - y) ** 2).mean().backward()
    per_rank = global_batch // env.world_size
    part = slice(env.rank * per_rank, (env.rank + 1) * per_rank)
    out: dict = {}
    for name, enabled in (("sync", True), ("plain", False)):
        model = ddp.convert_sync_batchnorm(
            copy.deepcopy(base), enabled=enabled, world_size=env.world_size, per_rank_batch=per_rank
        )
        wrapped = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        ((wrapped(x[part]) - y[part]) ** 2).mean().backward()
        pairs = list(zip(model.parameters(), reference.parameters()))
        out[f"{name}_grad_gap"] = max((p.grad - q.grad).abs().max().item() for p, q in pairs)
        bn_pairs = [(m, r) for m, r in zip(model.modules(), reference.modules()) if isinstance(m, _BatchNorm)]
        out[f"{name}_stat_gap"] = max(
            max((m.running_mean - r.running_mean).abs().max().item(), (m.running_var - r.running_var).abs().max().item())
            for m, r in bn_pairs
        )
        out[f"{name}_bn_types"] = sorted({type(m).__name__ for m, _ in bn_pairs})
    return out


def nccl_syncbn() -> dict | None:
    """Multi-GPU: the SyncBatchNorm 1-vs-2 equality with torch's CUDA kernels (TF32 off)."""
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    gaps = syncbn_gaps(ddp.local_device())
    gathered = ddp.gather_to_rank_zero(gaps)
    return {"gathered": gathered} if ddp.dist_env().rank == 0 else None


def vote_and_average(_: str) -> dict | None:
    """Agreement (min over ranks, on a CPU group) and the flat gradient average, on two ranks."""
    torch.set_num_threads(1)
    rank = ddp.dist_env().rank
    facts: dict = {"min": ddp.agree_min(5 + rank), "all_true": ddp.agree_all(True),
                   "one_false": ddp.agree_all(rank == 0)}
    torch.manual_seed(0)
    net = nn.Linear(3, 2)
    with torch.no_grad():
        net.weight.add_(rank)  # diverged weights: broadcast_parameters brings rank 0's back
    ddp.broadcast_parameters(net)
    x = torch.full((4, 3), float(rank + 1))
    net(x).sum().backward()
    mine = [p.grad.clone() for p in net.parameters()]
    facts["averaged"] = ddp.average_gradients(net.parameters())
    gathered = ddp.gather_to_rank_zero([g.tolist() for g in mine])
    facts["grads"] = [p.grad.tolist() for p in net.parameters()]
    facts["weights"] = ddp.gather_to_rank_zero(net.weight.tolist())
    if rank == 0:
        facts["expected"] = [((torch.tensor(a) + torch.tensor(b)) / 2).tolist() for a, b in zip(*gathered)]
        return facts
    return None
