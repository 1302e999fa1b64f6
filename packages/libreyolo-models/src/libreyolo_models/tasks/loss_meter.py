"""Validation losses: the family's training loss on the validation batches, averaged over the
split (every rank's share), for ``results.csv``'s ``val/<term>_loss`` columns beside training's.

A validation without a loss function (``model.val()``, a task that does not compute one) adds
no columns. A loss that fails on a validation batch (a family whose training head needs
training mode, say) is reported once and the losses are left out: validation metrics never
depend on it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

import libreyolo_ddp

log = logging.getLogger(__name__)

LossFn = Callable[[Tensor, Any], Tensor]
"""``(images, targets) -> items [T]``: one batch's detached loss terms (``LossResult.items``)."""


class LossMeter:
    """Sums each batch's loss terms; ``result`` averages them over every rank's batches."""

    def __init__(self, loss: LossFn | None, names: Sequence[str]) -> None:
        self.loss, self.names = loss, tuple(names)
        self.sums: Tensor | None = None
        self.batches = 0

    def update(self, images: Tensor, targets: Any) -> None:
        if self.loss is None:
            return
        try:
            items = self.loss(images, targets).detach().double().cpu()
        except Exception as err:  # noqa: BLE001 - a validation loss never ends a validation
            log.warning("validation loss left out: the loss failed on a validation batch (%s: %s)",
                        type(err).__name__, err)
            self.loss = None
            self.sums = None
            return
        self.sums = items if self.sums is None else self.sums + items
        self.batches += 1

    def result(self) -> dict[str, float]:
        """``{"val/<term>_loss": mean}``; every rank must call it (one all-reduce when distributed)."""
        env = libreyolo_ddp.dist_env()
        n = len(self.names)
        local = torch.zeros(n + 2, dtype=torch.float64)
        if self.sums is not None and len(self.sums) == n:
            local[:n], local[n] = self.sums, self.batches
        local[n + 1] = 1.0 if self.loss is None and self.names else 0.0   # this rank gave up
        total = libreyolo_ddp.all_reduce_sum(local) if env.world_size > 1 else local
        if not self.names or total[n] == 0 or total[n + 1] > 0:
            return {}
        return {f"val/{name}_loss": float(v) for name, v in zip(self.names, total[:n] / total[n])}
