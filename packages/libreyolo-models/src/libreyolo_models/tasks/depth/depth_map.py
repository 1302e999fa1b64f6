"""``Results.depth``: a relative depth map at the original picture's size, and its colour picture."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

COLORMAP = "Spectral_r"  # the official Depth Anything V2 visualisation's (near: red, far: blue)


class DepthMap:
    """One picture's relative depth (a ``ResultContent``).

    ``data`` is ``float32 [H, W]`` (a tensor, or a NumPy array after ``numpy()``): larger is nearer
    (an affine-invariant inverse depth: compare values within one picture, not across pictures).
    """

    csv_columns: tuple[str, ...] = ("min", "max", "mean")

    def __init__(self, data: Tensor | np.ndarray) -> None:
        self.data = data

    @property
    def shape(self) -> tuple[int, int]:
        return int(self.data.shape[0]), int(self.data.shape[1])

    def _array(self) -> np.ndarray:
        return torch.as_tensor(self.data).detach().float().cpu().numpy()

    def rows(self, names: dict[int, str]) -> list[dict[str, object]]:
        depth = self._array()
        return [{"min": float(depth.min()), "max": float(depth.max()), "mean": float(depth.mean())}]

    def summary(self, names: dict[int, str]) -> str:
        depth = self._array()
        h, w = self.shape
        return f"relative depth {depth.min():.3g}..{depth.max():.3g} ({w}x{h})"

    def colorize(self) -> np.ndarray:
        """RGB ``uint8 [H, W, 3]``: the map stretched to 0..255 over its own range, then coloured
        with ``COLORMAP`` (what the official ``run.py`` writes)."""
        from matplotlib import colormaps  # lazy: seconds to import, only needed to draw

        depth = self._array().astype(np.float64)
        span = float(depth.max() - depth.min())
        levels = ((depth - depth.min()) / span * 255.0 if span > 0 else np.zeros_like(depth)).astype(np.uint8)
        return (colormaps[COLORMAP](levels)[..., :3] * 255).astype(np.uint8)

    def plot(self, image: np.ndarray, names: dict[int, str], *, labels: bool, conf: bool) -> np.ndarray:
        """The colour-mapped depth (the size of ``image``, which it stands beside in a viewer)."""
        return self.colorize()

    def to(self, device: str | torch.device) -> DepthMap:
        return DepthMap(torch.as_tensor(self.data).to(device))

    def numpy(self) -> DepthMap:
        return DepthMap(self._array())

    def __len__(self) -> int:
        return 1

    def __repr__(self) -> str:
        h, w = self.shape
        return f"DepthMap(height={h}, width={w})"
