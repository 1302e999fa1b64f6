"""Line crops -> text. Upside-down lines are turned first (the angle classifier, at one fixed
input size). Then each crop is resized to the recogniser's height, grouped into width buckets so
one forward runs per bucket (few distinct shapes), padded on the right with mid-grey (the value
upstream's zero padding has after normalisation), decoded greedily."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from .angle_net import ANGLE_SIZE
from .ctc import greedy_decode
from .svtr_net import REC_HEIGHT

MIN_WIDTH = 320     # RapidOCR's recogniser width for a batch of short lines (48 x 320)
BUCKET = 160        # widths are padded up to a multiple of this: at most a few shapes per picture


def line_width(h: int, w: int) -> int:
    return max(1, min(int(math.ceil(REC_HEIGHT * w / max(h, 1))), 4096))


def bucket_width(width: int) -> int:
    return max(MIN_WIDTH, int(math.ceil(width / BUCKET)) * BUCKET)


def line_tensor(crop: np.ndarray, device: torch.device, dtype: torch.dtype, max_width: int = 4096) -> Tensor:
    """RGB ``uint8 [h, w, 3]`` -> ``[3, 48, w']`` in [0, 1], the aspect ratio kept (bilinear), ``w'``
    at most ``max_width``."""
    x = torch.from_numpy(np.ascontiguousarray(crop)).to(device).permute(2, 0, 1).float().div_(255.0)[None]
    size = (REC_HEIGHT, min(line_width(crop.shape[0], crop.shape[1]), max_width))
    return F.interpolate(x, size=size, mode="bilinear", align_corners=False)[0].clamp_(0, 1).to(dtype)


def upright(net: torch.nn.Module, crops: Sequence[np.ndarray], *, device: torch.device, dtype: torch.dtype,
            thresh: float = 0.9, batch: int = 16) -> list[np.ndarray]:
    """The crops, each turned 180 degrees where the classifier says upside down with more than
    ``thresh`` confidence (RapidOCR's ``cls_thresh``); lines narrower than 192 px at height 48 are
    padded with mid-grey, wider ones squeezed to it, as upstream does."""
    height, width = ANGLE_SIZE
    out = list(crops)
    with torch.inference_mode():
        for start in range(0, len(crops), batch):
            chunk = range(start, min(start + batch, len(crops)))
            x = torch.full((len(chunk), 3, height, width), 0.5, dtype=dtype, device=device)
            for row, i in enumerate(chunk):
                line = line_tensor(crops[i], device, dtype, max_width=width)
                x[row, :, :, :line.shape[-1]] = line
            probs = net.classify_angle(x).float().cpu()  # type: ignore[operator]
            for row, i in enumerate(chunk):
                if float(probs[row, 1]) > thresh:
                    out[i] = np.ascontiguousarray(crops[i][::-1, ::-1])
    return out


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
