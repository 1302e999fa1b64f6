"""Non-finite training: skipped optimizer steps, counted on the device, and the stop they lead to.

A NaN or inf loss (a learning rate far too high, a poisoned batch) would otherwise train on
silently: its gradients turn every weight NaN in one step and the run still "succeeds". Here:

- a step whose loss is non-finite (or, without AMP, whose gradient norm is) leaves the weights
  as they were: the fused optimizer kernels skip it on the device, the way ``GradScaler`` skips
  an overflow, with no read-back per step (under AMP the scaler's own skip covers it);
- the counts stay on the device and are read with the progress figures, every
  ``trainer.LOG_EVERY`` batches and at the end of each epoch;
- ``NONFINITE_STEP_LIMIT`` skipped optimizer steps in a row stop the run with
  ``TrainingDivergedError``, whose one line says when, how many, and what to change;
- before a checkpoint is written the weights (raw and EMA) are checked: a non-finite state
  stops the run the same way and is never saved (``last.pt`` keeps the previous epoch), so
  ``best.pt`` never holds NaN.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from torch import Tensor, nn

import libreyolo_ddp

from ..checkpoint import inf_by_design, nonfinite_entries
from ..errors import TrainingDivergedError

log = logging.getLogger(__name__)

NONFINITE_STEP_LIMIT = 10
"""Optimizer steps in a row whose loss was NaN or inf, after which training stops."""


class NonFiniteSteps:
    """Device-side counters of skipped optimizer steps: in all, and the longest run in a row."""

    def __init__(self, device: torch.device) -> None:
        self.pending = torch.zeros((), dtype=torch.bool, device=device)  # this accumulation window
        self._counts = torch.zeros(3, dtype=torch.int64, device=device)  # total, current run, longest run
        self.reported = 0

    def see_loss(self, total: Tensor) -> None:
        """One micro-batch's loss: a non-finite one marks the window's optimizer step as skipped."""
        self.pending.logical_or_(~torch.isfinite(total.detach()).all())

    def end_step(self, bad: Tensor) -> None:
        """Count the optimizer step just taken (``bad``: it was skipped), then clear the window."""
        flag = bad.to(torch.int64)
        total, run, longest = self._counts.unbind()
        total.add_(flag)
        run.add_(1).mul_(flag)
        torch.maximum(longest, run, out=longest)
        self.pending.zero_()


def skip_flag(pending: Tensor, grad_norm: Tensor | None) -> Tensor:
    """Whether the optimizer step is to be skipped: a non-finite loss in its window, or a
    non-finite gradient norm (when the step computed one)."""
    if grad_norm is None:
        return pending.clone()
    return pending | ~torch.isfinite(grad_norm)


class DivergenceWatch:
    """The trainer's side: reads the step counters and checks the weights, every rank alike
    (the verdicts are agreed over ranks first, so all stop together or none does)."""

    def __init__(self, steps: NonFiniteSteps, net: nn.Module, *, world: int, advice: str, last: Path) -> None:
        self.steps, self.world, self.advice, self.last = steps, world, advice, last
        self.masks = inf_by_design(net.state_dict())  # as training starts: inf masks, not divergence

    def watch(self, epoch: int, batch: int) -> None:
        """At a read-back point: warn when steps were skipped since the last one; stop past the limit."""
        total, _, longest = self._agreed(self.steps._counts)
        if total and not self.steps.reported:  # the first one; the epoch lines count the rest
            log.warning("epoch %d, batch %d: the loss was NaN or inf, so the optimizer step was skipped and the "
                        "weights left as they were (training stops after %d such steps in a row)", epoch + 1,
                        batch + 1, NONFINITE_STEP_LIMIT)
        self.steps.reported = total
        if longest >= NONFINITE_STEP_LIMIT:
            raise TrainingDivergedError(
                f"training stopped at epoch {epoch + 1}, batch {batch + 1}: the loss was NaN or inf for {longest} "
                f"optimizer steps in a row ({total} skipped in all); {self._saved()}; {self.advice}")

    def note(self) -> str:
        """``; 3 steps skipped (NaN/inf loss)`` for the epoch line, when any was (as of the last read)."""
        n = self.steps.reported
        return f"; {n} optimizer step{'s' if n != 1 else ''} skipped so far (NaN/inf loss)" if n else ""

    def check_state(self, epoch: int, nets: dict[str, nn.Module]) -> None:
        """Before anything of ``epoch`` is saved: every weight and buffer finite, or stop."""
        bad = {name: nonfinite_entries(net.state_dict(), self.masks) for name, net in nets.items()}
        count = sum(len(keys) for keys in bad.values())
        agreed = self._agreed(torch.tensor([count, 0, 0]))[0] if self.world > 1 else count
        if agreed:
            example = next((f"{name} {keys[0]}" for name, keys in bad.items() if keys), "on another rank")
            raise TrainingDivergedError(
                f"training stopped after epoch {epoch + 1}: {agreed} weight tensors hold NaN or inf (e.g. "
                f"{example}); nothing of this epoch was saved, {self._saved()}; {self.advice}")

    def _agreed(self, counts: Tensor) -> tuple[int, int, int]:
        if self.world > 1:
            counts = libreyolo_ddp.all_reduce_max(counts.clone())
        total, run, longest = (int(v) for v in counts.tolist())
        return total, run, longest

    def _saved(self) -> str:
        return f"{self.last} holds the last finite epoch" if self.last.is_file() else "no checkpoint was written"
