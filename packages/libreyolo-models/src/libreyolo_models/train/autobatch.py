"""``batch=-1``: measure how many images of this model fit in one GPU's memory for training."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

import libreyolo_ddp

if TYPE_CHECKING:
    from ..model import LibreYOLO


def probe_training_batch(model: LibreYOLO, imgsz: int, device: torch.device, amp: bool) -> int:
    """Images per step that fit on ``device`` for a forward+backward at ``imgsz`` (60 % of memory)."""
    net = model.net.to(device).train()

    def step(batch: int) -> None:
        images = torch.rand(batch, 3, imgsz, imgsz, device=device)
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            outputs = model.train_forward(images)
        sum(o.float().mean() for o in outputs).backward()
        net.zero_grad(set_to_none=True)

    try:
        return libreyolo_ddp.probe_batch_size(step, device)
    finally:
        net.zero_grad(set_to_none=True)
