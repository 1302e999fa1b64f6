"""``Results.masks`` for matting: the soft foreground alpha at the picture's size, and its cut-out."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor


class AlphaMatte:
    """One picture's alpha matte (a ``ResultContent``).

    ``data`` is ``float32 [H, W]`` in [0, 1] (a tensor, or a NumPy array after ``numpy()``): 1 is
    foreground. ``pixels()`` is the 8-bit alpha a saved matte holds; ``cutout(image)`` the RGBA
    picture with that alpha. ``save`` (through ``Results.save``) writes both.
    """

    csv_columns: tuple[str, ...] = ("foreground", "height", "width")

    def __init__(self, data: Tensor | np.ndarray) -> None:
        self.data = data

    @property
    def shape(self) -> tuple[int, int]:
        return int(self.data.shape[0]), int(self.data.shape[1])

    def _array(self) -> np.ndarray:
        return torch.as_tensor(self.data).detach().float().cpu().numpy()

    def pixels(self) -> np.ndarray:
        """``uint8 [H, W]``: the alpha clamped, scaled to 255 and rounded."""
        return np.rint(np.clip(self._array(), 0.0, 1.0) * 255.0).astype(np.uint8)

    def cutout(self, image: np.ndarray) -> np.ndarray:
        """RGBA ``uint8 [H, W, 4]``: ``image`` (RGB, this matte's size) with the alpha as its fourth channel."""
        if image.shape[:2] != self.shape:
            raise ValueError(f"a {image.shape[1]}x{image.shape[0]} picture for a {self.shape[1]}x{self.shape[0]} "
                             "matte: they must be the same size")
        return np.dstack([image[..., :3], self.pixels()])

    def foreground(self) -> float:
        """The mean alpha: the share of the picture that is foreground."""
        return float(self._array().mean())

    def rows(self, names: dict[int, str]) -> list[dict[str, object]]:
        h, w = self.shape
        return [{"foreground": self.foreground(), "height": h, "width": w}]

    def summary(self, names: dict[int, str]) -> str:
        h, w = self.shape
        return f"alpha matte {w}x{h}, {self.foreground():.0%} foreground"

    def plot(self, image: np.ndarray, names: dict[int, str], *, labels: bool, conf: bool) -> np.ndarray:
        """The cut-out composited over a grey checkerboard (RGB, so any viewer shows it)."""
        h, w = self.shape
        cells = ((np.arange(h)[:, None] // 16 + np.arange(w)[None, :] // 16) % 2).astype(np.float32)
        board = (cells * 64 + 128)[..., None]
        alpha = self.pixels().astype(np.float32)[..., None] / 255.0
        return np.rint(image[..., :3].astype(np.float32) * alpha + board * (1 - alpha)).astype(np.uint8)

    def save(self, path: Path, image: np.ndarray) -> Path:
        """Write the RGBA cut-out (``<path>`` as PNG: JPEG has no alpha) and the alpha itself
        (``<stem>_alpha.png``, grey); returns the cut-out's path."""
        from PIL import Image

        cutout = path.with_suffix(".png")
        Image.fromarray(self.cutout(image), mode="RGBA").save(cutout)
        Image.fromarray(self.pixels(), mode="L").save(path.with_name(f"{path.stem}_alpha.png"))
        return cutout

    def to(self, device: str | torch.device) -> AlphaMatte:
        return AlphaMatte(torch.as_tensor(self.data).to(device))

    def numpy(self) -> AlphaMatte:
        return AlphaMatte(self._array())

    def __len__(self) -> int:
        return 1

    def __repr__(self) -> str:
        h, w = self.shape
        return f"AlphaMatte(height={h}, width={w})"
