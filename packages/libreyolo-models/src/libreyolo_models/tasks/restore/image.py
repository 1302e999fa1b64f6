"""``Results.image`` for restoration: the restored picture at the original image's size."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


class RestoredImage:
    """One restored picture (a ``ResultContent``).

    ``data`` is ``float32 [3, H, W]`` RGB in [0, 1] (a tensor, or a NumPy array after ``numpy()``),
    the size of the input picture; ``pixels()`` gives it as the 8-bit ``[H, W, 3]`` image that
    ``save`` writes.
    """

    csv_columns: tuple[str, ...] = ("height", "width")

    def __init__(self, data: Tensor | np.ndarray) -> None:
        self.data = data

    @property
    def shape(self) -> tuple[int, int]:
        return int(self.data.shape[-2]), int(self.data.shape[-1])

    def pixels(self) -> np.ndarray:
        """RGB ``uint8 [H, W, 3]``: clamped, scaled and rounded like a saved picture."""
        data = torch.as_tensor(self.data).detach().float().cpu()
        return data.clamp(0.0, 1.0).mul(255.0).round().to(torch.uint8).permute(1, 2, 0).numpy()

    def rows(self, names: dict[int, str]) -> list[dict[str, object]]:
        h, w = self.shape
        return [{"height": h, "width": w}]

    def summary(self, names: dict[int, str]) -> str:
        h, w = self.shape
        return f"restored {w}x{h}"

    def plot(self, image: np.ndarray, names: dict[int, str], *, labels: bool, conf: bool) -> np.ndarray:
        """The restored picture itself (``image``, the degraded input, is what it replaces)."""
        return self.pixels()

    def to(self, device: str | torch.device) -> RestoredImage:
        return RestoredImage(torch.as_tensor(self.data).to(device))

    def numpy(self) -> RestoredImage:
        return RestoredImage(torch.as_tensor(self.data).detach().cpu().numpy())

    def __len__(self) -> int:
        return 1

    def __repr__(self) -> str:
        h, w = self.shape
        return f"RestoredImage(height={h}, width={w})"
