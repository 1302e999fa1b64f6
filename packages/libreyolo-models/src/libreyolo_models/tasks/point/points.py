"""``Results.points``: an image's predicted object centroids with class and score.

Rows are ``(x, y, class, confidence)``, x and y in pixels of the original image: the order the
upstream point contract (LibreYOLO ADR 0003) gives, coordinates first. ``xy``, ``cls``, ``conf``
and ``xyn`` (normalised to the image) are views of the columns.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont
from torch import Tensor

from ..drawing import class_color


class Points:
    """One image's points (a ``ResultContent``).

    Args:
        data: ``float [N, 4]`` rows (x, y, class, confidence), pixels of the original image; a
            tensor, or a NumPy array after ``numpy()``.
        orig_shape: ``(h, w)`` of the original image.
    """

    csv_columns: tuple[str, ...] = ("name", "class", "confidence", "x", "y")

    def __init__(self, data: Tensor | np.ndarray, orig_shape: tuple[int, int]) -> None:
        self.data = data
        self.orig_shape = orig_shape

    @property
    def xy(self) -> Tensor | np.ndarray:
        return self.data[:, :2]

    @property
    def cls(self) -> Tensor | np.ndarray:
        return self.data[:, 2]

    @property
    def conf(self) -> Tensor | np.ndarray:
        return self.data[:, 3]

    @property
    def xyn(self) -> Tensor | np.ndarray:
        """``xy`` divided by the image's width and height."""
        h, w = self.orig_shape
        scale = [w, h]
        return self.xy / (torch.tensor(scale, dtype=self.data.dtype, device=self.data.device)
                          if isinstance(self.data, Tensor) else np.asarray(scale, dtype=self.data.dtype))

    def _rows(self) -> list[list[float]]:
        data = self.data.detach().float().cpu() if isinstance(self.data, Tensor) else torch.from_numpy(
            np.asarray(self.data, dtype=np.float32))
        return data.tolist()

    def rows(self, names: dict[int, str]) -> list[dict[str, object]]:
        return [{"name": names.get(int(c), str(int(c))), "class": int(c), "confidence": conf, "x": x, "y": y}
                for x, y, c, conf in self._rows()]

    def summary(self, names: dict[int, str]) -> str:
        counts: dict[str, int] = {}
        for _, _, c, _ in self._rows():
            name = names.get(int(c), str(int(c)))
            counts[name] = counts.get(name, 0) + 1
        return ", ".join(f"{n} {name}" for name, n in counts.items()) or "no points"

    def plot(self, image: np.ndarray, names: Mapping[int, str], *, labels: bool, conf: bool) -> np.ndarray:
        """A copy of ``image`` with a ringed dot per point in its class colour, labelled."""
        canvas = Image.fromarray(image.copy())
        draw = ImageDraw.Draw(canvas)
        radius = max(3, round(min(canvas.size) * 0.012))
        font = ImageFont.load_default()
        for x, y, c, score in self._rows():
            color = class_color(int(c))
            draw.ellipse((x - radius, y - radius, x + radius, y + radius), fill=color, outline=(255, 255, 255),
                         width=max(1, radius // 3))
            if labels:
                text = names.get(int(c), str(int(c))) + (f" {score:.2f}" if conf else "")
                left, top, right, bottom = draw.textbbox((x + radius + 2, y - radius), text, font=font)
                draw.rectangle((left - 1, top - 1, right + 1, bottom + 1), fill=color)
                draw.text((x + radius + 2, y - radius), text, fill=(255, 255, 255), font=font)
        return np.asarray(canvas)

    def to(self, device: str | torch.device) -> Points:
        return Points(torch.as_tensor(self.data).to(device), self.orig_shape)

    def numpy(self) -> Points:
        return Points(torch.as_tensor(self.data).detach().cpu().numpy(), self.orig_shape)

    def __len__(self) -> int:
        return int(self.data.shape[0])

    def __repr__(self) -> str:
        return f"Points(n={len(self)}, orig_shape={self.orig_shape})"
