"""YOLOv9-E2E training loss: YOLOv9's loss on each branch, summed (eager only, never graphed).

As upstream: the one-to-many branch gets YOLOv9's task-aligned assignment with ten candidates per
ground truth, the one-to-one branch the same assignment with one (``topk=1``), so that exactly one
anchor learns to fire for each object. Each branch is normalised by its own sum of soft targets;
the two (box, cls, dfl) triples are added term by term (what the items report).

Distributed training: the two normalisers are summed over ranks in one collective
(``layers.loss_scale.global_normalizers``), then each rank returns ``W * (U_many / N_many +
U_one / N_one) * global_batch`` (see ``layers.dfl_loss`` for why).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from torch import Tensor

from ...layers.dfl_loss import TaskAlignedDFLLoss
from ...layers.loss_scale import check_scaling, global_normalizers

BRANCHES = ("one2many", "one2one")


class Yolo9E2ELoss:
    """Loss of the dual head's raw outputs; a plain object (no parameters, no module).

    Args:
        nc: number of classes.
        box, cls, dfl: gains of the three terms (both branches).
        topk_many, topk_one: candidates per ground truth of each branch's assigner (10 and 1).
    """

    def __init__(self, nc: int, *, box: float = 7.5, cls: float = 0.5, dfl: float = 1.5, topk_many: int = 10,
                 topk_one: int = 1) -> None:
        self.one2many = TaskAlignedDFLLoss(nc, box=box, cls=cls, dfl=dfl, topk=topk_many)
        self.one2one = TaskAlignedDFLLoss(nc, box=box, cls=cls, dfl=dfl, topk=topk_one)
        self.gains = (box, cls, dfl)

    def __call__(self, outputs: Mapping[str, Sequence[Tensor]], targets: Tensor, *,
                 normalizer_sum: Callable[[Tensor], Tensor] | None = None,
                 world_size: int = 1, global_batch: int | None = None) -> tuple[Tensor, Tensor]:
        """Loss of one (per-rank) batch.

        Args:
            outputs: ``{"one2many": maps, "one2one": maps}``, each one ``[B, 64 + nc, H, W]`` map
                per stride level (``Yolo9E2ENet.training_outputs``).
            targets: ``[M, 6]`` rows (image index, class, cx, cy, w, h), normalised boxes.
            normalizer_sum: maps this rank's two normalisers (``[2]`` float32) to their sums over
                ranks; called exactly once per call. None means one process.
            world_size, global_batch: as in ``TaskAlignedDFLLoss``.

        Returns:
            ``(loss, items)``: the scalar to backward and a detached ``[3]`` (box, cls, dfl), each
            the sum of both branches' normalised terms.

        Raises:
            ValueError: ``outputs`` lacks a branch, or a branch does not fit the head layout.
        """
        missing = [name for name in BRANCHES if name not in outputs]
        if missing:
            raise ValueError(f"YOLOv9-E2E outputs lack {missing}; pass Yolo9E2ENet.training_outputs(images), "
                             f"a dict with keys {BRANCHES}")
        many, many_local = self.one2many.terms(outputs["one2many"], targets)
        one, one_local = self.one2one.terms(outputs["one2one"], targets)
        global_batch = check_scaling(outputs["one2many"][0].shape[0], world_size, global_batch)
        norms = global_normalizers(torch.stack((many_local, one_local)), normalizer_sum)
        items = (many / norms[0] + one / norms[1]) * world_size
        return items.sum() * global_batch, items.detach()
