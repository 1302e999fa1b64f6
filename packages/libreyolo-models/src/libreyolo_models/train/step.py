"""One training iteration: forward (eager or graphed), the family's eager loss, backward, and
the optimizer step with gradient accumulation, AMP scaling, clipping and the EMA update."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, cast

import torch
from torch import Tensor, nn

import libreyolo_ddp

from ..contract.family import Family, LossContext
from .divergence import NonFiniteSteps, skip_flag
from .ema import ModelEMA
from .fused_optim import AnyOptimizer, FusedOptimizer
from .grad_tools import clip_grad_norm
from .half_weights import HalfWeights


class StepTimer:
    """With ``profile=True``: synchronize and time each phase (data, forward, loss, backward,
    gradient sync, optimizer, EMA, logging); otherwise free. Totals are per epoch, in seconds;
    ``steps`` counts the micro-batches they cover, so a benchmark can report per-step times."""

    PHASES = ("data", "forward", "loss", "backward", "sync", "optimizer", "ema", "log")

    def __init__(self, enabled: bool, device: torch.device) -> None:
        self.enabled = enabled
        self.device = device
        self.totals = dict.fromkeys(self.PHASES, 0.0)
        self.steps = 0

    def reset(self) -> None:
        self.totals = dict.fromkeys(self.PHASES, 0.0)
        self.steps = 0

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if not self.enabled:
            yield
            return
        import time

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        start = time.perf_counter()
        yield
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.totals[name] += time.perf_counter() - start


class TrainStep:
    """Runs iterations for one model; the caller owns the schedule and the epoch loop."""

    def __init__(self, family: Family, forward: Callable[..., Any], net: nn.Module,
                 optimizer: AnyOptimizer, scaler: torch.amp.GradScaler, ema: ModelEMA | None, *,
                 amp: bool, device: torch.device, context: LossContext, max_grad_norm: float,
                 timer: StepTimer, takes_targets: bool = False, sync_gradients: bool = False,
                 half_weights: HalfWeights | None = None) -> None:
        self.family, self.forward, self.net = family, forward, net
        self.optimizer, self.scaler, self.ema = optimizer, scaler, ema
        self.amp = amp and device.type == "cuda"
        self.device, self.context = device, context
        self.max_grad_norm, self.timer = max_grad_norm, timer
        self.takes_targets = takes_targets  # the forward runs a family's training head (split capture)
        self.sync_gradients = sync_gradients  # several ranks without the DDP wrapper: average here
        # Walking the module tree for its parameters costs ~1-3 ms of host time per call (675
        # tensors in YOLOv9-t); an eager step is host-bound, so the list is made once.
        self.parameters = list(net.parameters())
        self.half_weights = half_weights  # fp16 weight copies the forward runs on (see train.half_weights)
        self.nonfinite = NonFiniteSteps(device)  # steps skipped for a NaN/inf loss (see train.divergence)

    def start_epoch(self, epoch: int) -> None:
        """The loss context of ``epoch`` (epoch-aware terms read it)."""
        self.context = replace(self.context, epoch=epoch)
        if self.half_weights is not None:  # weights or frozen layers a callback changed between epochs
            self.half_weights.follow_requires_grad()
            self.half_weights.refresh()

    def autocast(self) -> contextlib.AbstractContextManager:
        """fp16 autocast on CUDA; the cache is off so a captured graph never holds stale casts."""
        if not self.amp:
            return contextlib.nullcontext()
        return torch.autocast("cuda", dtype=torch.float16, cache_enabled=False)

    def forward_backward(self, images: Tensor, targets: Any) -> Tensor:
        """Forward, loss and backward of one micro-batch; returns the detached loss items."""
        half = self.half_weights
        with self.autocast():
            with self.timer.phase("forward"), half.installed() if half is not None else contextlib.nullcontext():
                outputs = self.forward(images, targets) if self.takes_targets else self.forward(images)
            with self.timer.phase("loss"):
                result = self.family.compute_loss(outputs, targets, self.context)
                self.nonfinite.see_loss(result.total)
        with self.timer.phase("backward"):
            self.scaler.scale(result.total).backward()
            if half is not None:
                half.grads_to_masters()
        return result.items

    def optimizer_step(self) -> None:
        """Unscale, clip (unless ``max_grad_norm`` is 0), step, clear grads, update the EMA.

        A step is skipped on the device, its weights left as they were, when a loss of its window
        was NaN or inf or (without AMP) its gradient norm is; with AMP the scaler skips a
        non-finite gradient itself. ``nonfinite`` counts the skips (``train.divergence``)."""
        if self.sync_gradients:
            with self.timer.phase("sync"):
                libreyolo_ddp.average_gradients(self.parameters)
        # GradScaler reads only param_groups and the fused-step attributes: FusedOptimizer has them.
        optimizer = cast(torch.optim.Optimizer, self.optimizer)
        with self.timer.phase("optimizer"):
            self.scaler.unscale_(optimizer)
            norm = clip_grad_norm(self.parameters, self.max_grad_norm) if self.max_grad_norm > 0 else None
            scaled = self.scaler.is_enabled()
            # Under AMP an overflow skip is routine (the scaler's search for its scale): only a
            # non-finite loss counts there.
            bad = skip_flag(self.nonfinite.pending, None if scaled else norm)
            if scaled:
                self.scaler.step(optimizer)
            else:
                _step_unless(self.optimizer, bad)
            self.scaler.update()
            self.optimizer.zero_grad(set_to_none=True)
            if self.half_weights is not None:
                self.half_weights.refresh()
            self.nonfinite.end_step(bad)
        if self.ema is not None:
            with self.timer.phase("ema"):
                self.ema.update(self.net)


def _step_unless(optimizer: AnyOptimizer, skip: Tensor) -> None:
    """``optimizer.step()`` unless ``skip`` (a bool tensor): on the device for the fused kernels
    (they read ``found_inf`` as for a scaler's overflow), with one read-back for ``torch.optim``'s."""
    if isinstance(optimizer, FusedOptimizer):
        optimizer.found_inf = skip.to(torch.float32)
        try:
            optimizer.step()
        finally:
            del optimizer.found_inf
    elif not bool(skip):
        optimizer.step()


class SeamThenHead(nn.Module):
    """``forward(images, targets)``: the captured training seam (a module or its graph), then the
    family's eager ``training_head``, inside one module so DDP sees every parameter used."""

    _seam: Callable[[Tensor], Any]
    _family: Family

    def __init__(self, net: nn.Module, seam: Callable[[Tensor], Any], family: Family) -> None:
        super().__init__()
        self.net = net
        object.__setattr__(self, "_seam", seam)  # not a submodule: its parameters are net's
        object.__setattr__(self, "_family", family)

    def forward(self, images: Tensor, targets: Any = None) -> Any:
        return self._family.training_head(self.net, self._seam(images), targets)
