"""``Results.keypoints`` of pose estimation: each detected object's keypoints, original pixels.

``data`` is ``float [N, K, 3]``: x, y and a confidence in [0, 1] per keypoint (the family's
visibility score; 1 where it predicts none), in the order of ``Results.boxes``. Plots draw the
skeleton: COCO's limbs for 17 keypoints, otherwise the keypoints joined in order as a closed
outline (the bundled ``shapes-pose`` draws each shape's outline), skipping keypoints under
``KPT_CONF``.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import torch
from PIL import Image, ImageDraw
from torch import Tensor

from ..drawing import class_color

KPT_CONF = 0.5
"""Keypoints scoring under this are not drawn (nor limbs touching them)."""

COCO_SKELETON = ((15, 13), (13, 11), (16, 14), (14, 12), (11, 12), (5, 11), (6, 12), (5, 6), (5, 7), (6, 8),
                 (7, 9), (8, 10), (1, 2), (0, 1), (0, 2), (1, 3), (2, 4), (3, 5), (4, 6))
"""COCO's 19 limbs between its 17 person keypoints (0-based)."""


def skeleton_for(k: int) -> tuple[tuple[int, int], ...]:
    """The limbs drawn for ``k`` keypoints (see the module docstring)."""
    if k == 17:
        return COCO_SKELETON
    return tuple((i, (i + 1) % k) for i in range(k)) if k > 1 else ()


class Keypoints:
    """Keypoints of one image's detected objects (see the module docstring); a ``ResultContent``."""

    csv_columns: tuple[str, ...] = ("keypoints",)

    def __init__(self, data: Tensor | np.ndarray, orig_shape: tuple[int, int]) -> None:
        self.data = cast(Tensor, data)
        self.orig_shape = orig_shape

    def __len__(self) -> int:
        return int(self.data.shape[0])

    def _numpy(self) -> np.ndarray:
        return self.data if isinstance(self.data, np.ndarray) else self.data.detach().cpu().numpy()

    @property
    def xy(self) -> Tensor:
        """``[N, K, 2]`` pixel positions."""
        return self.data[..., :2]

    @property
    def xyn(self) -> Tensor:
        """``[N, K, 2]`` positions normalised by the original width and height."""
        h, w = self.orig_shape
        scale = np.array([w, h], dtype=np.float32) if isinstance(self.data, np.ndarray) else torch.tensor(
            [w, h], dtype=self.data.dtype, device=self.data.device)
        return self.xy / scale

    @property
    def conf(self) -> Tensor:
        """``[N, K]`` per-keypoint confidences."""
        return self.data[..., 2]

    def rows(self, names: dict[int, str]) -> list[dict[str, object]]:
        return [{"keypoints": [[round(float(x), 2), round(float(y), 2), round(float(c), 4)] for x, y, c in obj]}
                for obj in self._numpy()]

    def summary(self, names: dict[int, str]) -> str:
        return f"{len(self)} poses"

    def plot(self, image: np.ndarray, names: dict[int, str], *, labels: bool, conf: bool) -> np.ndarray:
        """``image`` with every object's skeleton: limbs as lines, keypoints as dots."""
        canvas = Image.fromarray(np.ascontiguousarray(image))
        draw = ImageDraw.Draw(canvas)
        width = max(1, round(sum(canvas.size) / 2 * 0.004))
        data = self._numpy()
        limbs = skeleton_for(data.shape[1]) if data.ndim == 3 else ()
        for obj in data:
            for a, b in limbs:
                if obj[a, 2] >= KPT_CONF and obj[b, 2] >= KPT_CONF:
                    draw.line([tuple(obj[a, :2].tolist()), tuple(obj[b, :2].tolist())], fill=class_color(a + 3),
                              width=width)
            for j, (x, y, c) in enumerate(obj.tolist()):
                if c >= KPT_CONF:
                    r = width + 1
                    draw.ellipse((x - r, y - r, x + r, y + r), fill=class_color(j + 7))
        return np.asarray(canvas)

    def label_lines(self, boxes: Any, *, save_conf: bool = False) -> list[str]:
        """YOLO pose rows ``class cx cy w h x1 y1 c1 ... [conf]`` (normalised; ``c`` the keypoint's
        confidence, read back as a visibility); ``boxes``: the result's ``Boxes``."""
        h, w = self.orig_shape
        data = self._numpy()
        cls, conf = np.asarray(boxes.cls).reshape(-1), np.asarray(boxes.conf).reshape(-1)
        xywhn = np.asarray(boxes.xywhn).reshape(-1, 4)
        lines = []
        for i in range(len(data)):
            kp = np.concatenate((data[i, :, :2] / np.array([w, h]), data[i, :, 2:3]), 1)
            text = f"{int(cls[i])} " + " ".join(f"{v:.6f}" for v in (*xywhn[i], *kp.reshape(-1)))
            lines.append(text + (f" {float(conf[i]):.6f}" if save_conf else ""))
        return lines

    def select(self, index: Tensor | np.ndarray) -> Keypoints:
        """The keypoints of objects ``index`` (tracking keeps the tracked ones)."""
        idx = np.asarray(index, dtype=np.int64)
        data = self.data[idx] if isinstance(self.data, np.ndarray) else self.data[torch.as_tensor(idx)]
        return Keypoints(data, self.orig_shape)

    def to(self, device: str | torch.device) -> Keypoints:
        data = torch.from_numpy(self.data) if isinstance(self.data, np.ndarray) else self.data
        return Keypoints(data.to(device), self.orig_shape)

    def cpu(self) -> Keypoints:
        return self.to("cpu")

    def numpy(self) -> Keypoints:
        return Keypoints(self._numpy(), self.orig_shape)

    def __repr__(self) -> str:
        k = int(self.data.shape[1]) if self.data.ndim == 3 else 0
        return f"Keypoints(n={len(self)}, keypoints={k}, orig_shape={self.orig_shape})"
