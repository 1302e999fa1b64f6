"""Predict's detection-only modes, resolved once per call: tiled (sliced) inference (``tile=``,
``predict.tiling``) and test-time augmentation (``augment=True``, ``predict.tta``). Both need
``[N, 6]`` box rows to merge, so any other task refuses them by name."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch import Tensor

from ..errors import ConfigError
from ..settings import PredictConfig
from .tiling import TiledPredict
from .tta import augmented_predictions

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..handle import ModelHandle


class DetectModes:
    """``tiled``: the tiling runner (None when ``tile`` is unset); ``augment``: TTA is on."""

    def __init__(self, model: ModelHandle, cfg: PredictConfig, forward: Callable[[Tensor], Any], options: Any,
                 imgsz: int, pad_rows: Callable[[Tensor, int], Tensor]) -> None:
        wanted = [name for name, on in (("tile", cfg.tile is not None), ("augment", cfg.augment)) if on]
        if wanted and model.task_spec.name != "detect":
            what = "sliced detection (boxes merged across windows)" if wanted[0] == "tile" else \
                "test-time augmentation for detection (boxes merged across flips and scales)"
            raise ConfigError(f"{wanted[0]}= is {what}, and this {model.spec.name} model's task is {model.task!r}; "
                              f"predict without {wanted[0]}= (or use a detect model)")
        self.augment = cfg.augment
        self._forward, self._options, self._cfg = forward, options, cfg
        self._postprocess = lambda out: model.family.postprocess(out, options)
        self.tiled: TiledPredict | None = None
        if cfg.tile is not None:
            task = model.task_spec
            self.tiled = TiledPredict(
                tile=cfg.tile, overlap=cfg.tile_overlap, merge=cfg.tile_merge, iou=cfg.iou, max_det=cfg.max_det,
                agnostic=cfg.agnostic_nms,
                prepare=lambda images, shapes: task.prepare_batch(images, imgsz, model.dtype, model.device, shapes),
                forward=forward, postprocess=self._postprocess, pad=pad_rows)

    def run_tiled(self, pictures: list[Tensor]) -> tuple[list[Tensor], list[Any]]:
        """Each picture (``uint8 [H, W, 3]`` on the device) through its windows: detections and mappings."""
        if self.tiled is None:
            raise RuntimeError("run_tiled without tile=")
        done = [self.tiled(p) for p in pictures]
        return [d for d, _ in done], [info for _, info in done]

    def run_augmented(self, x: Tensor) -> list[Tensor]:
        cfg = self._cfg
        return augmented_predictions(x, self._forward, self._postprocess, iou=cfg.iou, max_det=cfg.max_det,
                                     agnostic=cfg.agnostic_nms)
