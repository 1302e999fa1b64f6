"""``Results.masks`` of instance segmentation: one mask per detected object, at the original size.

The family predicts mask logits over the letterboxed input at ``1 / 4`` of its side; they are
resized bilinearly to the input, cut back to the image's area, resized to the original image and
thresholded at 0 (probability 0.5). ``xy`` gives each mask's outline as a polygon (its longest
outer border, following pixel edges), which is also what ``save_txt`` writes, normalised, in
YOLO's segment format.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ...data.letterbox_images import LetterboxInfo
from ..drawing import class_color
from .mask_shapes import mask_outline

OVERLAY_ALPHA = 0.45


def masks_to_original(logits: Tensor, info: LetterboxInfo, imgsz: int) -> Tensor:
    """``float [N, h, w]`` mask logits over the ``imgsz`` input -> ``bool [N, H, W]`` over the
    original image (see the module docstring)."""
    h, w = info.orig_shape
    if logits.shape[0] == 0:
        return torch.zeros((0, h, w), dtype=torch.bool)
    full = F.interpolate(logits[:, None].float(), size=(imgsz, imgsz), mode="bilinear", align_corners=False)
    new_h, new_w = max(1, round(h * info.ratio)), max(1, round(w * info.ratio))
    left, top = int(info.pad[0]), int(info.pad[1])
    inner = full[:, :, top:top + new_h, left:left + new_w]
    if inner.shape[-2:] != (h, w):
        inner = F.interpolate(inner, size=(h, w), mode="bilinear", align_corners=False)
    return inner[:, 0] > 0


class InstanceMasks:
    """Masks of one image's detected objects, in the order of ``Results.boxes``.

    ``data`` is ``bool [N, H, W]`` over the original image (a tensor, or a NumPy array after
    ``Results.numpy()``); ``cls`` the objects' class ids (colours the overlay).
    """

    csv_columns: tuple[str, ...] = ()

    def __init__(self, data: Tensor | np.ndarray, cls: Tensor | np.ndarray | None = None) -> None:
        self.data = cast(Tensor, data)
        self.cls = cls
        self._xy: list[np.ndarray] | None = None

    @property
    def orig_shape(self) -> tuple[int, int]:
        return int(self.data.shape[1]), int(self.data.shape[2])

    def __len__(self) -> int:
        return int(self.data.shape[0])

    def _numpy(self) -> np.ndarray:
        return self.data if isinstance(self.data, np.ndarray) else self.data.detach().cpu().numpy()

    @property
    def xy(self) -> list[np.ndarray]:
        """Per object its outline ``float32 [k, 2]`` in original pixels (``[0, 2]`` when empty)."""
        if self._xy is None:
            self._xy = [mask_outline(m) for m in self._numpy()]
        return self._xy

    @property
    def xyn(self) -> list[np.ndarray]:
        """``xy`` normalised by the original width and height."""
        h, w = self.orig_shape
        return [p / np.array([w, h], dtype=np.float32) for p in self.xy]

    def rows(self, names: dict[int, str]) -> list[dict[str, object]]:
        return [{"polygon": [[round(float(x), 2), round(float(y), 2)] for x, y in poly]} for poly in self.xy]

    def summary(self, names: dict[int, str]) -> str:
        return f"{len(self)} masks"

    def plot(self, image: np.ndarray, names: dict[int, str], *, labels: bool, conf: bool) -> np.ndarray:
        """``image`` with every mask tinted in its class colour (boxes are drawn over it)."""
        out = image.astype(np.float32)
        classes = [0] * len(self) if self.cls is None else [int(c) for c in np.asarray(self.cls).reshape(-1)]
        for mask, cls in zip(self._numpy(), classes):
            colour = np.asarray(class_color(cls), dtype=np.float32)
            out[mask] = out[mask] * (1 - OVERLAY_ALPHA) + colour * OVERLAY_ALPHA
        return np.clip(out + 0.5, 0, 255).astype(np.uint8)

    def label_lines(self, boxes: Any, *, save_conf: bool = False) -> list[str]:
        """YOLO segment rows ``class x1 y1 x2 y2 ... [conf]`` (normalised outline), one per object
        with an outline; ``boxes``: the result's ``Boxes`` (classes and scores)."""
        cls, conf = np.asarray(boxes.cls).reshape(-1), np.asarray(boxes.conf).reshape(-1)
        lines = []
        for i, poly in enumerate(self.xyn):
            if len(poly) < 3:
                continue
            text = f"{int(cls[i])} " + " ".join(f"{v:.6f}" for v in poly.reshape(-1))
            lines.append(text + (f" {float(conf[i]):.6f}" if save_conf else ""))
        return lines

    def select(self, index: Tensor | np.ndarray) -> InstanceMasks:
        """The masks of the objects ``index`` (tracking keeps the tracked ones)."""
        idx = np.asarray(index, dtype=np.int64)
        data = self.data[idx] if isinstance(self.data, np.ndarray) else self.data[torch.as_tensor(idx)]
        cls = None if self.cls is None else np.asarray(self.cls)[idx]
        return InstanceMasks(data, cls)

    def to(self, device: str | torch.device) -> InstanceMasks:
        data = torch.from_numpy(self.data) if isinstance(self.data, np.ndarray) else self.data
        return InstanceMasks(data.to(device), self.cls)

    def cpu(self) -> InstanceMasks:
        return self.to("cpu")

    def numpy(self) -> InstanceMasks:
        return InstanceMasks(self._numpy(), self.cls)

    def __repr__(self) -> str:
        return f"InstanceMasks(n={len(self)}, orig_shape={self.orig_shape})"
