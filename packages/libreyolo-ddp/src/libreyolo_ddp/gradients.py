"""Gradient synchronisation without the DDP wrapper: one flat all-reduce per optimizer step.

DDP averages gradients in buckets from hooks that fire as autograd accumulates them. A training
step whose backward replays a CUDA graph hands gradients back another way, and gradient
accumulation only needs them averaged once, before the optimizer steps. ``average_gradients``
does exactly that: it packs every gradient into one buffer, all-reduces it once, divides by the
world size and unpacks. With two ranks the result equals DDP's bit for bit (a sum of two numbers
does not depend on the order, and halving is exact).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.distributed as dist
from torch import nn

from libreyolo_ddp.collectives import is_dist_initialized


@torch.no_grad()
def average_gradients(parameters: Iterable[nn.Parameter]) -> int:
    """Replace each ``.grad`` by its mean over ranks; returns how many tensors were averaged.

    Every rank must pass the same parameters in the same order (a model's own ``parameters()``
    does) with the same ones holding a gradient, or the ranks would pack different buffers:
    train every parameter in every step (as DDP without ``find_unused_parameters`` requires
    too). A no-op without a process group.
    """
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads or not is_dist_initialized() or dist.get_world_size() == 1:
        return len(grads)
    world = dist.get_world_size()
    by_dtype: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
    for g in grads:
        by_dtype.setdefault((g.dtype, g.device), []).append(g)
    for group in by_dtype.values():
        flat = torch.cat([g.reshape(-1) for g in group])
        dist.all_reduce(flat)
        flat.div_(world)
        offset = 0
        for g in group:
            n = g.numel()
            g.copy_(flat[offset:offset + n].view_as(g))
            offset += n
    return len(grads)


@torch.no_grad()
def broadcast_parameters(module: nn.Module, src: int = 0) -> None:
    """Make every rank's parameters and buffers rank ``src``'s (what DDP does when it wraps)."""
    if not is_dist_initialized() or dist.get_world_size() == 1:
        return
    for tensor in [*module.parameters(), *module.buffers()]:
        dist.broadcast(tensor.data, src=src)
