"""A batch of pictures each resized to its own network size (tasks whose networks take any size
that is a multiple of their stride: depth, ocr), padded with zeros on the right and bottom to the
largest; each picture's result is cut back to its own size before it is mapped to the picture."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

Size = tuple[int, int]


def padded_batch(images: Sequence[Tensor], imgsz: int, dtype: torch.dtype, device: torch.device, *,
                 network_size: Callable[[int, int, int], Size],
                 resize: Callable[[Tensor, Size], Tensor]) -> tuple[Tensor, list[tuple[Size, Size]]]:
    """``uint8 [H, W, 3]`` pictures -> ``[B, 3, h, w]`` on ``device`` and, per picture,
    ``((H, W), (h_i, w_i))``: its size and its network size (``network_size(H, W, imgsz)``, reached
    by ``resize`` on the device)."""
    resized, infos = [], []
    for image in images:
        h, w = int(image.shape[0]), int(image.shape[1])
        size = network_size(h, w, imgsz)
        resized.append(resize(image.to(device, non_blocking=True), size))
        infos.append(((h, w), size))
    hmax, wmax = max(r.shape[-2] for r in resized), max(r.shape[-1] for r in resized)
    batch = torch.zeros((len(resized), 3, hmax, wmax), dtype=torch.float32, device=device)
    for i, r in enumerate(resized):
        batch[i, :, :r.shape[-2], :r.shape[-1]] = r
    return batch.to(dtype), infos
