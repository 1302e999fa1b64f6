"""What a sharded validation adds over ranks: its per-rank sums and its image count."""

from __future__ import annotations

import torch
from torch import Tensor

import libreyolo_ddp


def sum_over_ranks(sums: Tensor, n_images: int) -> tuple[Tensor, int]:
    """This rank's ``sums`` and ``n_images`` -> their totals over every rank (as given in one process).
    Every rank must call it."""
    if libreyolo_ddp.dist_env().world_size <= 1:
        return sums, n_images
    total = libreyolo_ddp.all_reduce_sum(torch.tensor([n_images], dtype=torch.int64))
    return libreyolo_ddp.all_reduce_sum(sums), int(total.item())
