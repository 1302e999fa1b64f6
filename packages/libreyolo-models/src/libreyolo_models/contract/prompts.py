"""What a promptable segmenter (the ``prompt-segment`` task, SAM) and its task exchange: the
prompts of one predict call, each picture's input geometry, and one picture's prediction.

It sits in the contract because both sides read it: the task parses the user's prompts and builds
``Results``, the family transforms them and decodes masks; neither imports the other.

Geometry as Meta's ``SamPredictor`` (``utils/transforms.py`` ``ResizeLongestSide``): a picture is
resized so its longer side is the input side (1024 as published), each side ``int(side * scale +
0.5)``, and padded bottom-right to a square; prompts given in the picture's pixels are scaled by
the per-axis ratio ``new / old``; mask logits over the square input are resized to it (bilinear),
cut to the resized picture and resized to the original one (bilinear), then thresholded at 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

MASK_THRESHOLD = 0.0  # upstream's Sam.mask_threshold: logits above it are the mask


@dataclass(frozen=True)
class AutoMasks:
    """Settings of automatic whole-picture masks, with the defaults of Meta's
    ``SamAutomaticMaskGenerator`` (one crop layer, no small-region clean-up): a grid of
    ``points_per_side`` squared single-point prompts decoded ``points_per_batch`` at a time into
    three masks each; a mask is kept when its predicted IoU exceeds ``pred_iou_thresh`` and its
    stability score (the IoU of the mask thresholded at logit +offset and at -offset) exceeds
    ``stability_score_thresh``; then box NMS at ``box_nms_thresh`` over the predicted IoU, and at
    most ``max_masks`` (predict's ``max_det``), best first."""

    points_per_side: int = 32
    points_per_batch: int = 64
    pred_iou_thresh: float = 0.88
    stability_score_thresh: float = 0.95
    stability_score_offset: float = 1.0
    box_nms_thresh: float = 0.7
    max_masks: int = 300


@dataclass(frozen=True)
class Prompts:
    """The prompts of one predict call, in ORIGINAL picture pixels, applied to every picture.

    ``points [P, N, 2]`` (x, y) with ``labels [P, N]`` (1 foreground, 0 background) and/or
    ``boxes [P, 4]`` (x1, y1, x2, y2): ``P`` prompts, each decoded into its own mask(s); a prompt
    may combine its points with its box. ``multimask``: three masks per prompt with their
    predicted IoU (upstream's ``multimask_output``), else the single-mask output. ``masks``
    ``[P, 1, s, s]``: a mask prompt per prompt, low-resolution logits over the square input as a
    previous call returned them (upstream's ``mask_input``; ``s`` = 256 at 1024 px), alone or with
    points / boxes. ``automatic`` (with none of them): masks of everything in the picture instead
    (``AutoMasks``)."""

    points: Tensor | None = None
    labels: Tensor | None = None
    boxes: Tensor | None = None
    multimask: bool = True
    automatic: AutoMasks | None = None
    masks: Tensor | None = None

    @property
    def count(self) -> int:
        if self.points is not None:
            return int(self.points.shape[0])
        if self.boxes is not None:
            return int(self.boxes.shape[0])
        return int(self.masks.shape[0]) if self.masks is not None else 0


@dataclass(frozen=True)
class PromptImage:
    """One picture's geometry: its original ``(H, W)``, its resized ``(h, w)`` inside the square
    ``side x side`` input."""

    orig_shape: tuple[int, int]
    input_shape: tuple[int, int]
    side: int


@dataclass
class PromptPrediction:
    """One picture's masks: ``masks bool [P, C, H, W]`` at the original size, ``scores [P, C]``
    (predicted IoU), ``logits [P, C, 4 * side / 16, ...]`` (the decoder's low-resolution logits
    over the square input, upstream's ``low_res_masks``), and the picture's geometry. Automatic
    masks: ``P`` masks of one each (``C = 1``), best first, ``points [P, 2]`` the grid point
    (original pixels) that gave each."""

    masks: Tensor
    scores: Tensor
    logits: Tensor
    image: PromptImage
    points: Tensor | None = None


def outside_picture(prompts: Prompts, orig_shape: tuple[int, int]) -> str | None:
    """The first point outside an ``(H, W)`` picture, or box wholly outside it, as text; None when
    every prompt touches the picture. (Coordinates in another scale, normalised or of the square
    input, are the usual cause: the decoder would still answer, with a meaningless mask.)"""
    h, w = orig_shape
    if prompts.points is not None:
        xy = prompts.points.reshape(-1, 2)
        bad = (xy[:, 0] < 0) | (xy[:, 0] > w) | (xy[:, 1] < 0) | (xy[:, 1] > h)
        if bool(bad.any()):
            x, y = (float(v) for v in xy[int(bad.nonzero()[0])])
            return f"point ({x:g}, {y:g})"
    if prompts.boxes is not None:
        b = prompts.boxes
        bad = (b[:, 2] < 0) | (b[:, 0] > w) | (b[:, 3] < 0) | (b[:, 1] > h)
        if bool(bad.any()):
            return "box ({:g}, {:g}, {:g}, {:g})".format(*(float(v) for v in b[int(bad.nonzero()[0])]))
    return None


def resized_shape(h: int, w: int, side: int) -> tuple[int, int]:
    """``(h, w)`` with the longer side brought to ``side`` (upstream's ``get_preprocess_shape``)."""
    scale = side * 1.0 / max(h, w)
    return int(h * scale + 0.5), int(w * scale + 0.5)


def to_input_coords(xy: Tensor, image: PromptImage) -> Tensor:
    """``[..., 2]`` (x, y) in original pixels -> input pixels (per-axis ratio)."""
    (h, w), (nh, nw) = image.orig_shape, image.input_shape
    scale = torch.tensor([nw / w, nh / h], dtype=torch.float32, device=xy.device)
    return xy.float() * scale


def logits_to_picture(logits: Tensor, image: PromptImage) -> Tensor:
    """``[P, C, h, w]`` low-resolution logits -> ``float [P, C, H, W]`` over the original picture."""
    p, c = logits.shape[:2]
    flat = logits.reshape(p * c, 1, *logits.shape[-2:]).float()
    full = F.interpolate(flat, size=(image.side, image.side), mode="bilinear", align_corners=False)
    full = full[..., :image.input_shape[0], :image.input_shape[1]]
    full = F.interpolate(full, size=image.orig_shape, mode="bilinear", align_corners=False)
    return full.reshape(p, c, *image.orig_shape)
