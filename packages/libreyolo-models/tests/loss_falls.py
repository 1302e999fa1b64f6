"""The "loss falls over 20 steps" check every detection family brings, as a reusable helper.

One fixed batch (the family's own ``sample_targets``, each box painted on a grey image in a colour
of its class), trained through the family's
seams exactly as the trainer calls them (``training_forward`` then ``compute_loss``) with AdamW:
a network that can fit one batch must drive its loss down. Import as ``from loss_falls import
train_steps`` (the tests folder is on ``sys.path``).
"""

from __future__ import annotations

import torch

from libreyolo_models import LibreYOLO
from libreyolo_models.contract.family import LossContext


def train_steps(model: LibreYOLO, *, steps: int = 20, imgsz: int = 64, batch: int = 2, lr: float = 2e-3,
                seed: int = 0, warmup: int = 0) -> list[torch.Tensor]:
    """The loss items of each of ``steps`` steps (detached ``[len(loss_names)]``), training
    ``model.net`` in place, after ``warmup`` steps that are not reported.

    ``warmup`` is for losses normalised by the sum of their soft targets (task-aligned
    assignment): an untrained network's soft targets sum to far below 1, the normaliser is
    clamped to 1, and so its first losses are small and *rise* while it starts to detect.
    """
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    net = model.net.train()
    targets = model.family.sample_targets(batch, imgsz, gen)
    images = painted_images(targets, batch, imgsz, gen)
    ctx = LossContext(gains=dict(model.spec.task(model.task).loss_gains), global_batch=batch)
    optimizer = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=0.0)
    history = []
    for _ in range(warmup + steps):
        result = model.family.compute_loss(model.family.training_forward(net, images), targets, ctx)
        optimizer.zero_grad()
        result.total.backward()
        optimizer.step()
        history.append(result.items.detach().clone())
    return history[warmup:]


def painted_images(targets: torch.Tensor, batch: int, imgsz: int, gen: torch.Generator) -> torch.Tensor:
    """``[batch, 3, imgsz, imgsz]`` grey images with light noise and each target box filled with a
    colour of its class: what is to be detected is in the pixels, as in real data."""
    images = 0.5 + 0.05 * torch.randn(batch, 3, imgsz, imgsz, generator=gen)
    palette = torch.rand(int(targets[:, 1].max().item()) + 1 if len(targets) else 1, 3, generator=gen)
    for image, cls, cx, cy, w, h in targets.tolist():
        x1, x2 = int((cx - w / 2) * imgsz), int((cx + w / 2) * imgsz)
        y1, y2 = int((cy - h / 2) * imgsz), int((cy + h / 2) * imgsz)
        images[int(image), :, y1:y2, x1:x2] = palette[int(cls)][:, None, None]
    return images.clamp(0, 1)
