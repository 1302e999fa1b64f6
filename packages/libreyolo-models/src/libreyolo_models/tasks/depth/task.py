"""Monocular depth: ``Results.depth``, a relative depth map per picture (inference only).

Each picture is resized keeping its aspect ratio (both sides at least ``imgsz``, multiples of the
patch: ``tasks.depth.resize``), not letterboxed; the family's ``inference_forward`` returns
``float [B, h, w]`` depth at that resolution; ``postprocess`` splits it; ``Results.depth`` holds
each map resized back to its picture. Validation reads pictures paired with metric depth maps
(``dataset``; the bundled ``shapes-depth``) and scores the relative depth after a per-picture
scale-and-shift fit (``metrics``: AbsRel, delta1). Training is not part of this task (it says so).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, cast

import numpy as np
import torch
from torch import Tensor

from ...errors import ConfigError
from ..base import Batch, EvalSettings, Prepared, PretrainedOnlyTask
from ..bundled_sets import resolve_bundled
from ..padded_batch import padded_batch
from ..results import Results
from .dataset import DepthData, DepthSplit, load_depth_data, read_depth_split
from .depth_map import DepthMap
from .metrics import DepthResult
from .resize import depth_to_picture, network_size, resize_picture
from .shapes_depth import BUNDLED_NAMES, ensure_shapes_depth
from .validation import DepthBatch, DepthValPipeline, evaluate_depth

if TYPE_CHECKING:
    from ...data.cache_store import CacheSetting
    from ..base import ModelView

_NO_TRAINING = ("the depth task is pretrained-only here: training a depth model (scale-and-shift invariant "
                "losses) is not implemented; use model.predict(...), or model.val(data=...) on pictures with "
                "metric depth maps (or the bundled 'shapes-depth')")


class DepthTask(PretrainedOnlyTask):
    name: ClassVar[str] = "depth"
    fitness_name: ClassVar[str] = "delta1 (scale-and-shift aligned)"
    results_field: ClassVar[str] = "depth"
    reduced_decode: ClassVar[bool] = False  # resized from the full picture (cubic), as published
    training_refusal: ClassVar[str | None] = _NO_TRAINING

    def load_data(self, data: Any) -> DepthData:
        """A depth data.yaml (pictures and depth maps), a folder holding one, a dict, or ``"shapes-depth"``."""
        data = resolve_bundled(data, self.name, BUNDLED_NAMES, ensure_shapes_depth)
        return load_depth_data(data)

    def load_split(self, data: Any, split: str) -> DepthSplit:
        return read_depth_split(self.load_data(data), split)

    def has_split(self, data: Any, split: str) -> bool:
        return split in self.load_data(data).splits


    def val_pipeline(self, index: Any, *, imgsz: int, batch_size: int, device: torch.device, workers: int,
                     cache: CacheSetting) -> Iterable[Batch]:
        """Pictures read and sized as predict does (``workers`` and ``cache`` unused: each is read once)."""
        return cast(Iterable[Batch], DepthValPipeline(index, imgsz=imgsz, batch_size=batch_size, device=device))

    def evaluate(self, model: ModelView, forward: Callable[[Tensor], Any], pipeline: Iterable[Batch], *,
                 settings: EvalSettings, progress: bool) -> DepthResult:
        return evaluate_depth(model, forward, cast(Iterable[DepthBatch], pipeline), half=settings.half,
                              progress=progress)

    def empty_best(self) -> dict[str, float]:
        return {"delta1": 0.0, "AbsRel": 0.0}

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
