"""Monocular depth: ``Results.depth``, a relative depth map per picture (inference only).

Each picture is resized keeping its aspect ratio (both sides at least ``imgsz``, multiples of the
patch: ``tasks.depth.resize``), not letterboxed; the family's ``inference_forward`` returns
``float [B, h, w]`` depth at that resolution; ``postprocess`` splits it; ``Results.depth`` holds
each map resized back to its picture. Datasets, training and validation are not part of this task
yet: relative depth is scored after a per-picture scale-and-shift fit (AbsRel, delta1), which no
reader or metric here implements; those verbs say so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from ...errors import ConfigError
from ..base import Prepared
from ..padded_batch import padded_batch
from ..predict_only import PredictOnlyTask
from ..results import Results
from .depth_map import DepthMap
from .resize import depth_to_picture, network_size, resize_picture

_PREDICT_ONLY = ("the depth task predicts only: depth datasets, training and validation (scale-and-shift aligned "
                 "AbsRel / delta1) are not implemented yet; use model.predict(...)")


class DepthTask(PredictOnlyTask):
    name: ClassVar[str] = "depth"
    results_field: ClassVar[str] = "depth"
    reduced_decode: ClassVar[bool] = False  # resized from the full picture (cubic), as published
    predict_only: ClassVar[str] = _PREDICT_ONLY
    training_refusal: ClassVar[str | None] = _PREDICT_ONLY

    def postprocess_options(self, options: Mapping[str, Any]) -> None:
        if options.get("classes") is not None:
            raise ConfigError(f"classes={options['classes']} filters detections; a depth model returns a depth map, "
                              "so there is nothing to filter")
        return None

    def prepare(self, image: np.ndarray, imgsz: int) -> Prepared:
        h, w = image.shape[:2]
        size = network_size(h, w, imgsz)
        return Prepared(resize_picture(torch.from_numpy(np.ascontiguousarray(image)), size), ((h, w), size))

    def prepare_batch(self, images: Sequence[Tensor], imgsz: int, dtype: torch.dtype, device: torch.device,
                      orig_shapes: Sequence[tuple[int, int]] | None = None) -> tuple[Tensor, list[Any]]:
        """Each picture resized on ``device`` to its own network size (``resize.network_size``);
        pictures of different network sizes in one batch are padded with zeros on the right and
        bottom to the largest (their depth is cut back before it is resized to the picture; the
        pad still shifts the attention, so ``batch=1``, the default, is the published computation)."""
        batch, infos = padded_batch(images, imgsz, dtype, device, network_size=network_size, resize=resize_picture)
        return batch, list(infos)

    def make_results(self, image: np.ndarray, name: str, names: dict[int, str], prediction: Any, info: Any,
                     speed: dict[str, float]) -> Results:
        picture, (nh, nw) = info
        depth = depth_to_picture(prediction[:nh, :nw], picture).float().cpu()
        return Results(image, name, names, speed=speed, contents={"depth": DepthMap(depth)})
