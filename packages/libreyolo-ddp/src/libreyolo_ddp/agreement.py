"""Ranks taking a decision together, cheaply: a minimum over ranks on a CPU (Gloo) group.

A decision that only some ranks take (capture a CUDA graph now, fall back to eager, stop) can
leave the others waiting in a collective forever. Agreeing first makes every rank act alike.
The vote runs on a Gloo group of its own, on CPU tensors, so asking costs a small message
between processes and no GPU synchronisation, even when training runs on NCCL.
"""

from __future__ import annotations

import threading

import torch
import torch.distributed as dist

from libreyolo_ddp.collectives import is_dist_initialized

_lock = threading.Lock()
_groups: dict[int, dist.ProcessGroup] = {}  # id(default group) -> its Gloo companion


def _cpu_group() -> dist.ProcessGroup | None:
    """The Gloo group beside the default one (the default group itself when it is Gloo)."""
    if str(dist.get_backend()) == "gloo":
        return None  # None means the default group in torch.distributed calls
    default = dist.group.WORLD
    with _lock:
        key = id(default)
        if key not in _groups:
            group = dist.new_group(backend="gloo")  # every rank creates it in the same order
            if not isinstance(group, dist.ProcessGroup):  # this rank is outside it: cannot happen for WORLD
                raise RuntimeError("could not create the Gloo agreement group beside the default group")
            _groups[key] = group
        return _groups[key]


def agree_min(value: int) -> int:
    """The minimum of ``value`` over all ranks (``value`` itself without a process group).

    Every rank must call it at the same point of its program, as any collective.
    """
    if not is_dist_initialized() or dist.get_world_size() == 1:
        return int(value)
    vote = torch.tensor([int(value)], dtype=torch.int64)
    dist.all_reduce(vote, op=dist.ReduceOp.MIN, group=_cpu_group())
    return int(vote.item())


def agree_all(flag: bool) -> bool:
    """True only when every rank passes True."""
    return agree_min(1 if flag else 0) == 1
