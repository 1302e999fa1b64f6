"""The user's prompts -> ``contract.prompts.Prompts``, with errors that name the option and show
the expected form. Accepted as Python values (lists, tuples, NumPy arrays, tensors) or, from the
command line, the same lists as text (``points=[[500,375]]``).

Forms (coordinates in the picture's pixels, as Meta's ``SamPredictor`` takes them):

- ``points=[x, y]`` or ``[[x, y], ...]``: one prompt of N points; ``[[[x, y], ...], ...]``: one
  prompt per group (groups of equal size);
- ``labels``: 1 (foreground) or 0 (background) per point, same nesting; default all 1;
- ``boxes=[x1, y1, x2, y2]`` or ``[[x1, y1, x2, y2], ...]``: one prompt per box; with points, the
  box count must equal the point groups' (each group joins its box) or be 1 with one group;
- ``mask_input``: low-resolution mask logits from a previous call on the same picture and imgsz
  (``Results.masks.best_logits()``: ``[P, 1, 256, 256]`` at 1024 px; also ``[256, 256]`` or
  ``[P, 256, 256]``), one per prompt or one for all, alone or with points / boxes (upstream's
  ``mask_input``, to refine a mask). Python only: the command line takes no arrays;
- none of them: automatic masks of the whole picture (``settings.AUTO_MASK_OPTIONS`` tune them).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ...contract.prompts import AutoMasks, Prompts
from ...errors import ConfigError
from ...settings import AUTO_MASK_OPTIONS

_POINTS_FORM = "points=[x, y], [[x, y], ...] or [[[x, y], ...], ...] (pixels of the picture)"
_BOXES_FORM = "boxes=[x1, y1, x2, y2] or [[x1, y1, x2, y2], ...] (pixels of the picture)"


def _array(value: Any, name: str, form: str) -> np.ndarray:
    """``value`` as a float64 array (text parsed as JSON), or a ConfigError naming ``name``."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ConfigError(f"{name}={value!r} is not a list; expected {form}") from None
    if isinstance(value, Tensor):
        value = value.detach().cpu().numpy()
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}={value!r} must be numbers in nested lists of equal length; expected {form}") from None
    if array.size == 0 or not np.isfinite(array).all():
        raise ConfigError(f"{name}={value!r} must be finite numbers; expected {form}")
    return array


def parse_prompts(options: Mapping[str, Any]) -> Prompts:
    """``points``, ``labels``, ``boxes``, ``multimask_output`` of predict's options -> ``Prompts``
    (none at all is an empty set: predict refuses it, a quantization check runs the encoder alone)."""
    raw_points, raw_labels, raw_boxes = options.get("points"), options.get("labels"), options.get("boxes")
    points = labels = boxes = None
    if raw_points is not None:
        array = _array(raw_points, "points", _POINTS_FORM)
        array = array.reshape(1, 1, 2) if array.ndim == 1 else array[None] if array.ndim == 2 else array
        if array.ndim != 3 or array.shape[-1] != 2:
            raise ConfigError(f"points: shape {list(np.shape(raw_points))} is not a point list; expected {_POINTS_FORM}")
        points = torch.from_numpy(array).float()
        if raw_labels is None:
            labels = torch.ones(points.shape[:2], dtype=torch.int64)
        else:
            lab = _array(raw_labels, "labels", "1 (foreground) or 0 (background) per point")
            if lab.size != points.shape[0] * points.shape[1] or not np.isin(lab, (0, 1)).all():
                raise ConfigError(f"labels={raw_labels!r} must give 1 (foreground) or 0 (background) for each of the "
                                  f"{points.shape[0] * points.shape[1]} points")
            labels = torch.from_numpy(lab.reshape(points.shape[:2])).long()
    elif raw_labels is not None:
        raise ConfigError("labels= labels points; pass points= with it (boxes need no labels)")
    if raw_boxes is not None:
        array = _array(raw_boxes, "boxes", _BOXES_FORM)
        array = array[None] if array.ndim == 1 else array
        if array.ndim != 2 or array.shape[-1] != 4:
            raise ConfigError(f"boxes: shape {list(np.shape(raw_boxes))} is not a box list; expected {_BOXES_FORM}")
        if ((array[:, 2] < array[:, 0]) | (array[:, 3] < array[:, 1])).any():
            raise ConfigError(f"boxes={raw_boxes!r}: each box is x1, y1, x2, y2 with x2 >= x1 and y2 >= y1")
        boxes = torch.from_numpy(array).float()
    if points is not None and boxes is not None and points.shape[0] != boxes.shape[0]:
        raise ConfigError(f"{points.shape[0]} point group(s) and {boxes.shape[0]} box(es): with both, each box joins "
                          "one group of points, so give as many groups as boxes (or one of each)")
    multimask = options.get("multimask_output", True)
    masks = _mask_prompts(options.get("mask_input"), points, boxes)
    tuned = {name: options[name] for name in AUTO_MASK_OPTIONS if options.get(name) is not None}
    if tuned and masks is not None:
        raise ConfigError(f"{next(iter(tuned))}= tunes automatic masks, made when no prompt is given; mask_input= "
                          "is a prompt: drop one of them")
    if masks is not None:
        return Prompts(points=points, labels=labels, boxes=boxes, multimask=bool(multimask), masks=masks)
    if points is None and boxes is None:
        max_masks = options.get("max_det")
        automatic = AutoMasks(**tuned, **({"max_masks": int(max_masks)} if max_masks is not None else {}))
        return Prompts(multimask=bool(multimask), automatic=automatic)
    if tuned:
        raise ConfigError(f"{next(iter(tuned))}= tunes automatic masks, made when no points= or boxes= are given; "
                          "drop it, or drop the prompts to mask everything in the picture")
    return Prompts(points=points, labels=labels, boxes=boxes, multimask=bool(multimask))


def _mask_prompts(raw: Any, points: Tensor | None, boxes: Tensor | None) -> Tensor | None:
    """``mask_input`` -> ``float32 [P, 1, s, s]`` (P: one per prompt, or 1 for all), or None."""
    if raw is None:
        return None
    if isinstance(raw, str):
        raise ConfigError("mask_input= takes an array (a previous result's Results.masks.best_logits()), which the "
                          "command line cannot pass; use it from Python")
    array = torch.as_tensor(_array(raw, "mask_input", "[s, s], [P, s, s] or [P, 1, s, s] logits"), dtype=torch.float32)
    if array.ndim == 2:
        array = array[None, None]
    elif array.ndim == 3:
        array = array[:, None]
    if array.ndim != 4 or array.shape[1] != 1 or array.shape[-1] != array.shape[-2]:
        raise ConfigError(f"mask_input: shape {list(np.shape(raw))} is not [s, s], [P, s, s] or [P, 1, s, s] square "
                          "logits (Results.masks.best_logits() of a previous call)")
    count = points.shape[0] if points is not None else boxes.shape[0] if boxes is not None else array.shape[0]
    if array.shape[0] not in (1, count):
        raise ConfigError(f"mask_input has {array.shape[0]} masks for {count} prompts: give one per prompt, or one "
                          "for all")
    return array
