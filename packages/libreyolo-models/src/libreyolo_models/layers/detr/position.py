"""The fixed 2-D sine-cosine position embedding the hybrid encoders' attention (AIFI) adds.

Upstream precomputes it for its ``eval_spatial_size`` (a plain attribute, not in the state dict);
computing it from the feature map's size gives the same values at every size.
"""

from __future__ import annotations

import torch
from torch import Tensor

PE_TEMPERATURE = 10000.0


def sincos_position_embedding(w: int, h: int, dim: int, *, device: torch.device | None = None,
                              temperature: float = PE_TEMPERATURE) -> Tensor:
    """Fixed 2-D sine-cosine embedding ``float32 [1, h * w, dim]`` for a ``h x w`` token grid.

    Built from ``arange`` on ``device`` (no host-to-device copy), so it is safe inside a CUDA
    graph. The grid is enumerated column-major (x outer, y inner) while tokens are row-major:
    upstream's (and the official) convention, which trained weights depend on.
    """
    if dim % 4:
        raise ValueError(f"position embedding width {dim} must be a multiple of 4")
    grid_w, grid_h = torch.meshgrid(torch.arange(w, dtype=torch.float32, device=device),
                                    torch.arange(h, dtype=torch.float32, device=device), indexing="ij")
    quarter = dim // 4
    omega = 1.0 / temperature ** (torch.arange(quarter, dtype=torch.float32, device=device) / quarter)
    out_w = grid_w.flatten()[:, None] * omega[None]
    out_h = grid_h.flatten()[:, None] * omega[None]
    return torch.cat((out_w.sin(), out_w.cos(), out_h.sin(), out_h.cos()), 1)[None]
