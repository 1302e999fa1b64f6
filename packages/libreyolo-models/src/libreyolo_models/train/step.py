"""One training iteration: forward (eager or graphed), the family's eager loss, backward, and
the optimizer step with gradient accumulation, AMP scaling, clipping and the EMA update."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from .ema import ModelEMA

if TYPE_CHECKING:
    from ..model import LibreYOLO


class StepTimer:
    """With ``profile=True``: synchronize and time each phase (data, forward, loss, backward,
    optimizer); otherwise free. Totals are per epoch, in seconds."""

    PHASES = ("data", "forward", "loss", "backward", "optimizer")

    def __init__(self, enabled: bool, device: torch.device) -> None:
        self.enabled = enabled
        self.device = device
        self.totals = dict.fromkeys(self.PHASES, 0.0)

    def reset(self) -> None:
        self.totals = dict.fromkeys(self.PHASES, 0.0)

    @contextlib.contextmanager
    def phase(self, name: str):  # noqa: ANN201 - context manager
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

    def __init__(self, model: LibreYOLO, forward: Callable[[Tensor], list[Tensor]], net: nn.Module,
                 optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler, ema: ModelEMA | None, *,
                 amp: bool, device: torch.device, world_size: int, global_batch: int,
                 normalizer_sum: Callable[[Tensor], Tensor] | None, max_grad_norm: float, timer: StepTimer) -> None:
        self.model, self.forward, self.net = model, forward, net
        self.optimizer, self.scaler, self.ema = optimizer, scaler, ema
        self.amp = amp and device.type == "cuda"
        self.device, self.world_size, self.global_batch = device, world_size, global_batch
        self.normalizer_sum, self.max_grad_norm, self.timer = normalizer_sum, max_grad_norm, timer

    def autocast(self) -> contextlib.AbstractContextManager:
        """fp16 autocast on CUDA; the cache is off so a captured graph never holds stale casts."""
        if not self.amp:
            return contextlib.nullcontext()
        return torch.autocast("cuda", dtype=torch.float16, cache_enabled=False)

    def forward_backward(self, images: Tensor, targets: Tensor) -> Tensor:
        """Forward, loss and backward of one micro-batch; returns the detached loss items."""
        with self.autocast():
            with self.timer.phase("forward"):
                raw = self.forward(images)
            with self.timer.phase("loss"):
                loss, items = self.model.compute_loss(
                    [r.float() for r in raw], targets, normalizer_sum=self.normalizer_sum,
                    world_size=self.world_size, global_batch=self.global_batch)
        with self.timer.phase("backward"):
            self.scaler.scale(loss).backward()
        return items

    def optimizer_step(self) -> None:
        """Unscale, clip, step (skipped by the scaler on inf/NaN), clear grads, update the EMA."""
        with self.timer.phase("optimizer"):
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.net.parameters(), max_norm=self.max_grad_norm)
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.optimizer.zero_grad(set_to_none=True)
            if self.ema is not None:
                self.ema.update(self.net)
