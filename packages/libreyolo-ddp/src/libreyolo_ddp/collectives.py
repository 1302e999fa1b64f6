"""Collective helpers that are safe to call whether or not a process group exists.

Every function here is the identity (or a no-op) without an initialized process
group, so training code calls them unconditionally and one code path serves one
process and many. They also cover backend gaps: Gloo has no ``AVG`` reduction, so
the mean is a sum divided by the world size, and NCCL can only move CUDA tensors, so
CPU inputs take a round trip through the current CUDA device.

Every rank must call the same collectives in the same order; a rank that skips one
leaves the others waiting until the process-group timeout.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def is_dist_initialized() -> bool:
    """True when a default process group exists in this process."""
    return dist.is_available() and dist.is_initialized()


def world_size() -> int:
    """Processes in the default group, or 1 without one."""
    return dist.get_world_size() if is_dist_initialized() else 1


def _backend() -> str:
    return str(dist.get_backend())


def comm_device() -> torch.device:
    """The device a tensor must live on to take part in a collective of this backend."""
    if _backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def barrier() -> None:
    """Wait until every rank gets here; a no-op without a process group."""
    if not is_dist_initialized():
        return
    if _backend() == "nccl":
        # Naming the device avoids NCCL guessing one (and warning) before any collective ran.
        dist.barrier(device_ids=[torch.cuda.current_device()])
    else:
        dist.barrier()


def _reduce(tensor: torch.Tensor, op: Any) -> torch.Tensor:  # Any: torch types ReduceOp.SUM apart from ReduceOp
    # A copy: reducing in place would mutate the caller's tensor on some ranks' timelines
    # and would break autograd for tensors that require grad.
    out = tensor.detach().clone()
    if not is_dist_initialized():
        return out
    device = comm_device()
    moved = out.to(device)
    dist.all_reduce(moved, op=op)
    return moved.to(out.device)


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum a tensor over all ranks.

    Args:
        tensor: any shape and dtype; it is not modified and need not be on the
            backend's device.

    Returns:
        A new, detached tensor on ``tensor``'s device holding the sum over ranks
        (a detached copy without a process group).
    """
    return _reduce(tensor, dist.ReduceOp.SUM)


def all_reduce_max(tensor: torch.Tensor) -> torch.Tensor:
    """Element-wise maximum over all ranks; e.g. "did any rank ask to stop?" as 0/1."""
    return _reduce(tensor, dist.ReduceOp.MAX)


def all_reduce_mean(tensor: torch.Tensor) -> torch.Tensor:
    """Average a tensor over all ranks.

    Gloo has no ``AVG`` reduction, so this always sums and divides, which gives the
    same result on every backend. Integer inputs come back as floating point (a mean
    of integers is not an integer).

    Returns:
        A new, detached tensor on ``tensor``'s device.
    """
    total = all_reduce_sum(tensor)
    if not total.is_floating_point() and not total.is_complex():
        total = total.to(torch.get_default_dtype())
    return total / world_size()


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Send a picklable object from rank ``src`` to every rank; returns it everywhere.

    Without a process group the object is returned unchanged. Other ranks' ``obj``
    arguments are ignored (pass None).
    """
    if not is_dist_initialized():
        return obj
    # Under NCCL, torch stages the pickled bytes on the current CUDA device, which
    # init_distributed() has set to this rank's GPU.
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def gather_to_rank_zero(obj: Any) -> list[Any] | None:
    """Collect one picklable object from every rank onto rank 0.

    Returns:
        On rank 0 a list with one entry per rank, in rank order; on other ranks None.
        Without a process group, ``[obj]``.
    """
    if not is_dist_initialized():
        return [obj]
    rank, size = dist.get_rank(), dist.get_world_size()
    out: list[Any] | None = [None] * size if rank == 0 else None
    dist.gather_object(obj, out, dst=0)
    return out
