"""Detections of one image (``Results.boxes``): the detect task's content of ``Results``."""

from __future__ import annotations

from typing import cast

import numpy as np
import torch
from torch import Tensor

from ...layers.boxes import xyxy_to_xywh


class Boxes:
    """Detections of one image, in original-image pixels.

    ``data`` is ``float [N, 6]``: x1, y1, x2, y2, confidence, class id, sorted by confidence. It is
    a tensor, or a NumPy array after ``Results.numpy()``; every property works on both.
    ``id`` is None unless the boxes come from ``model.track``: then ``int64 [N]`` track ids, one
    per box, stable across the frames of a source.
    """

    def __init__(self, data: Tensor | np.ndarray, orig_shape: tuple[int, int], id: Tensor | None = None) -> None:
        if id is not None and id.shape != (data.shape[0],):
            raise ValueError(f"Boxes: {data.shape[0]} boxes but track ids of shape {tuple(id.shape)}; "
                             "give one id per box")
        # Typed as a tensor, which it is except after ``Results.numpy()`` (the properties check).
        self.data = cast(Tensor, data)
        self.orig_shape = orig_shape
        self.id = None if id is None else id.to(torch.int64)

    @property
    def is_track(self) -> bool:
        """Whether these boxes carry track ids (``model.track``)."""
        return self.id is not None

    def __len__(self) -> int:
        return self.data.shape[0]

    @property
    def xyxy(self) -> Tensor:
        """``[N, 4]`` corners in pixels."""
        return self.data[:, :4]

    @property
    def xywh(self) -> Tensor:
        """``[N, 4]`` centre and size in pixels."""
        if isinstance(self.data, np.ndarray):
            xyxy = self.data[:, :4]
            return np.concatenate(((xyxy[:, :2] + xyxy[:, 2:]) / 2, xyxy[:, 2:] - xyxy[:, :2]), axis=1)
        return xyxy_to_xywh(self.xyxy)

    @property
    def _scale(self) -> Tensor:
        h, w = self.orig_shape
        if isinstance(self.data, np.ndarray):
            return np.array([w, h, w, h], dtype=self.data.dtype)
        return torch.tensor([w, h, w, h], dtype=self.data.dtype, device=self.data.device)

    @property
    def xyxyn(self) -> Tensor:
        """``[N, 4]`` corners normalized to [0, 1] by the original width and height."""
        return self.xyxy / self._scale

    @property
    def xywhn(self) -> Tensor:
        """``[N, 4]`` centre and size normalized to [0, 1]."""
        return self.xywh / self._scale

    @property
    def conf(self) -> Tensor:
        return self.data[:, 4]

    @property
    def cls(self) -> Tensor:
        return self.data[:, 5]

    def cpu(self) -> Boxes:
        return self.to("cpu")

    def cuda(self) -> Boxes:
        return self.to("cuda")

    def to(self, device: str | torch.device) -> Boxes:
        """A copy on ``device`` (NumPy-backed boxes become tensors again; track ids follow)."""
        data = torch.from_numpy(self.data) if isinstance(self.data, np.ndarray) else self.data
        return Boxes(data.to(device), self.orig_shape, None if self.id is None else self.id.to(device))

    def numpy(self) -> np.ndarray:
        """``data`` as a NumPy ``[N, 6]`` array."""
        return self.data if isinstance(self.data, np.ndarray) else self.data.cpu().numpy()

    def __repr__(self) -> str:
        ids = "" if self.id is None else f", ids={self.id.tolist()}"
        return f"Boxes(n={len(self)}, orig_shape={self.orig_shape}{ids})"


def _tensor(data: Tensor | np.ndarray) -> Tensor:
    return data if isinstance(data, Tensor) else torch.from_numpy(data)
