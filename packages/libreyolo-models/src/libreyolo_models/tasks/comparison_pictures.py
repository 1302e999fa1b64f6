"""``val_batch*_pred.jpg`` for tasks whose output is a picture (restore, matte): one row per image
of side-by-side panels (what went in, what came out, what was expected), so a glance shows what
the metrics average. Batches 0-2, rank 0, with ``val(plots=True)``."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import Tensor

import libreyolo_ddp

log = logging.getLogger(__name__)

BATCH_PICTURES = 3
MAX_ROWS = 8
GAP = 4   # grey pixels between panels


def panel(image: Tensor | np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``[3, H, W]`` / ``[H, W]`` in [0, 1], or ``uint8 [H, W]`` -> ``uint8 [h, w, 3]`` at ``size``."""
    source = torch.as_tensor(image).detach().cpu()
    t = source.float() / 255.0 if source.dtype == torch.uint8 else source.float()
    if t.ndim == 2:
        t = t[None].expand(3, -1, -1)
    if tuple(t.shape[-2:]) != size:
        t = F.interpolate(t[None], size=size, mode="bilinear", align_corners=False)[0]
    return (t.clamp(0, 1).permute(1, 2, 0) * 255 + 0.5).to(torch.uint8).numpy()


def save_comparison(save_dir: Path | None, number: int, rows: Sequence[Sequence[Tensor | np.ndarray]]) -> None:
    """``save_dir/val_batch{number}_pred.jpg``: each row's panels side by side, all at the size of
    the row's first panel; nothing outside the first ``BATCH_PICTURES`` batches or off rank 0."""
    if save_dir is None or number >= BATCH_PICTURES or libreyolo_ddp.dist_env().rank != 0 or not rows:
        return
    path = save_dir / f"val_batch{number}_pred.jpg"
    try:
        first = torch.as_tensor(rows[0][0])
        size = (int(first.shape[-2]), int(first.shape[-1]))
        lines = []
        for row in rows[:MAX_ROWS]:
            panels = [panel(p, size) for p in row]
            gap = np.full((size[0], GAP, 3), 114, np.uint8)
            lines.append(np.concatenate([x for p in panels for x in (p, gap)][:-1], axis=1))
        sep = np.full((GAP, lines[0].shape[1], 3), 114, np.uint8)
        canvas = np.concatenate([x for line in lines for x in (line, sep)][:-1], axis=0)
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(canvas).save(path, quality=90)
    except Exception as err:  # noqa: BLE001 - a picture is never worth a validation
        log.warning("could not draw %s: %s: %s", path.name, type(err).__name__, err)
