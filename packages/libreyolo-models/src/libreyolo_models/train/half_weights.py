"""fp16 copies of the weights autocast casts on every forward, kept from one step to the next.

Why: an eager AMP step is bound by how many operations the host issues. Autocast (with its cache
off, which graphs need) casts every convolution and linear weight to fp16 on each forward, and
autograd casts each of their gradients back: two operations per weight, about 470 of the ~3,400
in a YOLOv9-t step (233 weights). Here the fp16 copies are refreshed after each optimizer step by one
multi-tensor copy, swapped into their modules for the forward (autocast then has nothing to cast),
and their gradients land in the fp32 parameters' ``.grad`` through one multi-tensor copy (plus an
add while micro-batches accumulate).

The values are autocast's: the same round-to-nearest cast of the same weights, gradients converted
exactly and accumulated in fp32 as autograd does, so parameters and losses are bit-identical to
the casting step (tests). That holds only for a forward in which each of these layers runs once
(a layer called twice would add its two fp16 gradients in fp16, where per-call casts add them in
fp32), their weights reach only autocast's low-precision ops (no region with autocast off, no
``weight.sum()`` of one's own), and nothing reads a parameter's dtype; so a family opts in
(``TaskDecl.half_weights``). Two differences a caller can see: ``.grad`` of a parameter is the
same tensor from step to step (overwritten, not reallocated), and a layer frozen or unfrozen by
changing ``requires_grad`` is followed at the next epoch's start (a layer frozen mid-epoch gets no
gradient meanwhile; one unfrozen mid-epoch trains from the next epoch).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import Tensor, nn

CAST_MODULES = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d,
                nn.Linear)
"""Layers whose parameters autocast casts to its low precision (its fp16 op list's weights)."""


def applies(*, amp: bool, device: torch.device, graphed: bool, world: int, declared: bool) -> bool:
    """Whether a training run keeps fp16 weight copies: CUDA AMP, the eager forward (a graph
    replays its casts without launching them), one process (DDP reduces the fp32 parameters'
    gradients through autograd hooks these copies would bypass), and a family that opted in."""
    return amp and device.type == "cuda" and not graphed and world == 1 and declared


class HalfWeights:
    """The fp16 twins of ``net``'s fp32 convolution and linear parameters."""

    def __init__(self, net: nn.Module, dtype: torch.dtype = torch.float16) -> None:
        self.slots: list[tuple[dict[str, nn.Parameter | None], str, nn.Parameter, nn.Parameter]] = []
        twins: dict[int, nn.Parameter] = {}
        for module in net.modules():
            if not isinstance(module, CAST_MODULES):
                continue
            for name in ("weight", "bias"):
                master = module._parameters.get(name)
                if master is None or master.dtype != torch.float32:
                    continue
                if id(master) not in twins:  # same layout as the master (channels_last stays so)
                    twins[id(master)] = nn.Parameter(torch.empty_like(master, dtype=dtype),
                                                     requires_grad=master.requires_grad)
                self.slots.append((module._parameters, name, master, twins[id(master)]))
        self.pairs = list({id(m): (m, h) for _, _, m, h in self.slots}.values())
        self.masters: list[Tensor] = [m for m, _ in self.pairs]
        self.halves: list[Tensor] = [h for _, h in self.pairs]
        self.trained: list[tuple[nn.Parameter, nn.Parameter]] = []
        self._grads: list[Tensor] | None = None  # the masters' .grad tensors, reused step after step
        self._staging: list[Tensor] | None = None  # fp32 copies of a later micro-batch's gradients
        self.follow_requires_grad()
        self.refresh()

    def follow_requires_grad(self) -> None:
        """Give each twin its master's ``requires_grad`` (a callback may freeze or unfreeze layers
        between epochs; the trainer calls this at each epoch's start)."""
        trained = []
        for master, half in self.pairs:
            if half.requires_grad != master.requires_grad:
                half.requires_grad_(master.requires_grad)
            if master.requires_grad:
                trained.append((master, half))
        if [id(m) for m, _ in trained] != [id(m) for m, _ in self.trained]:
            self.trained, self._grads, self._staging = trained, None, None

    def __len__(self) -> int:
        return len(self.masters)

    def refresh(self) -> None:
        """Copy the fp32 weights into their fp16 twins (after each optimizer step)."""
        if self.masters:
            with torch.no_grad():
                torch._foreach_copy_(self.halves, self.masters)

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """The fp16 twins in their modules' places for the duration (the forward)."""
        for params, name, _, half in self.slots:
            params[name] = half
        try:
            yield
        finally:
            for params, name, master, _ in self.slots:
                params[name] = master

    def grads_to_masters(self) -> None:
        """After backward: each twin's fp16 gradient into its master's fp32 ``.grad`` (exact), added
        in fp32 where a micro-batch's gradient is already there; the twins' gradients cleared."""
        if self._grads is None:
            self._grads = [torch.empty_like(m) for m, _ in self.trained]
        fresh_dst, fresh_src, acc_dst, acc_src, acc_at = [], [], [], [], []
        for i, (master, half) in enumerate(self.trained):
            grad = half.grad
            if grad is None:  # not used by this forward: the master's gradient stays as it is
                continue
            half.grad = None
            if not master.requires_grad:  # frozen since the epoch began: no gradient, as autocast's casts give
                continue
            if master.grad is None:
                fresh_dst.append(self._grads[i])
                fresh_src.append(grad)
                master.grad = self._grads[i]
            else:
                acc_dst.append(master.grad)
                acc_src.append(grad)
                acc_at.append(i)
        with torch.no_grad():
            if fresh_dst:
                torch._foreach_copy_(fresh_dst, fresh_src)
            if acc_dst:
                if self._staging is None:
                    self._staging = [torch.empty_like(m) for m, _ in self.trained]
                staging = [self._staging[i] for i in acc_at]
                torch._foreach_copy_(staging, acc_src)
                torch._foreach_add_(acc_dst, staging)
