"""Line crops -> text: each crop resized to the recogniser's height, grouped into width buckets so
one forward runs per bucket (few distinct shapes), padded on the right with mid-grey (the value
upstream's zero padding has after normalisation), decoded greedily."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from .ctc import greedy_decode
from .svtr_net import REC_HEIGHT

MIN_WIDTH = 320     # RapidOCR's recogniser width for a batch of short lines (48 x 320)
BUCKET = 160        # widths are padded up to a multiple of this: at most a few shapes per picture


def line_width(h: int, w: int) -> int:
    return max(1, min(int(math.ceil(REC_HEIGHT * w / max(h, 1))), 4096))


def bucket_width(width: int) -> int:
    return max(MIN_WIDTH, int(math.ceil(width / BUCKET)) * BUCKET)


def line_tensor(crop: np.ndarray, device: torch.device, dtype: torch.dtype) -> Tensor:
    """RGB ``uint8 [h, w, 3]`` -> ``[3, 48, w']`` in [0, 1], the aspect ratio kept (bilinear)."""
    x = torch.from_numpy(np.ascontiguousarray(crop)).to(device).permute(2, 0, 1).float().div_(255.0)[None]
    size = (REC_HEIGHT, line_width(crop.shape[0], crop.shape[1]))
    return F.interpolate(x, size=size, mode="bilinear", align_corners=False)[0].clamp_(0, 1).to(dtype)


def recognize_lines(net: torch.nn.Module, crops: Sequence[np.ndarray], *, device: torch.device,
                    dtype: torch.dtype, batch: int = 16) -> list[tuple[str, float]]:
    """One ``(text, confidence)`` per crop, in the crops' order."""
    lines = [line_tensor(c, device, dtype) for c in crops]
    buckets: dict[int, list[int]] = {}
    for i, line in enumerate(lines):
        buckets.setdefault(bucket_width(line.shape[-1]), []).append(i)
    out: list[tuple[str, float]] = [("", 0.0)] * len(lines)
    with torch.inference_mode():
        for width, members in sorted(buckets.items()):
            for start in range(0, len(members), batch):
                chunk = members[start:start + batch]
                x = torch.full((len(chunk), 3, REC_HEIGHT, width), 0.5, dtype=dtype, device=device)
                for row, i in enumerate(chunk):
                    x[row, :, :, :lines[i].shape[-1]] = lines[i]
                for i, decoded in zip(chunk, greedy_decode(net.recognize(x))):  # type: ignore[operator]
                    out[i] = decoded
    return out
