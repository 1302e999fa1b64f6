"""A few optimizer steps through a family's seams on one fixed batch: the "loss falls" check every
detector family's tests run. Import as ``from family_steps import losses_over_steps``."""

from __future__ import annotations

import torch

from libreyolo_models import LibreYOLO
from libreyolo_models.contract.family import LossContext


def losses_over_steps(model: LibreYOLO, images: torch.Tensor, targets: torch.Tensor,
                      optimizer: torch.optim.Optimizer, steps: int = 20) -> list[float]:
    """The total loss before each of ``steps`` optimizer steps on ``(images, targets)``."""
    net, family = model.net.train(), model.family
    ctx = LossContext(gains=dict(model.spec.task(model.task).loss_gains))
    losses = []
    for _ in range(steps):
        result = family.compute_loss(family.training_forward(net, images), targets, ctx)
        optimizer.zero_grad()
        result.total.backward()
        optimizer.step()
        losses.append(result.total.item())
    return losses
