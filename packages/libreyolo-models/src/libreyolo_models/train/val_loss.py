"""The family's training loss on validation batches (``val/<term>_loss`` in ``results.csv``),
for tasks whose validator averages it (``Task.validation_losses``: detect, segment, pose; see
``tasks.loss_meter``).

It runs the EMA network's training forward (and the family's training head, for DETRs) under
``no_grad`` in eval mode, then the family's ``compute_loss`` with a one-process context: each
rank's batch is normalised by itself (validation shards are uneven, so a per-batch collective
could pair ranks wrongly); the meter averages the ranks once at the end. It costs one more
forward per validation batch. Other tasks (classify, semantic) get no loss function.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from ..contract.family import LossContext, has_training_head

if TYPE_CHECKING:
    from ..handle import ModelHandle
    from ..tasks.loss_meter import LossFn


def validation_loss(model: ModelHandle, net: nn.Module, context: LossContext) -> LossFn | None:
    """``(images, targets) -> items`` for ``net`` (the EMA copy), or None for a task whose
    validation computes no loss."""
    if not model.task_spec.validation_losses:
        return None
    family = model.family
    head = has_training_head(family)

    @torch.no_grad()
    def loss(images: Tensor, targets: Any) -> Tensor:
        ctx = dataclasses.replace(context, world_size=1, global_batch=int(images.shape[0]), normalizer_sum=None)
        images = images.to(next(net.parameters()).dtype)
        outputs = family.training_forward(net, images)
        if head:
            outputs = family.training_head(net, outputs, targets)
        return family.compute_loss(outputs, targets, ctx).items

    return loss
