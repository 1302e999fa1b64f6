"""Image restoration: paired (degraded, clean) pictures, PSNR / SSIM, ``Results.image``.

Data: a YAML naming ``input``/``target`` folders per split (``tasks.restore.reader``), or the
bundled ``"shapes-restore"``. Training batches are aligned random crops of ``imgsz`` (targets:
``float32 [B, 3, S, S]`` in [0, 1] on the device). The network sees whole pictures at their own
size otherwise (validation and predict): the family's ``inference_forward`` returns the restored
``float [B, 3, H, W]``, tiling pictures larger than its training crop; ``postprocess`` clamps
and splits them; ``Results.image`` holds each cut back to its picture. Fitness is PSNR.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from ...errors import ConfigError
from ..base import Batch, EvalSettings, Prepared, Task, TaskMetrics, TrainOptions
from ..bundled_sets import resolve_bundled
from ..results import Results
from .image import RestoredImage
from .pipeline import PairTrainPipeline, PairValPipeline
from .reader import PairedData, PairSplit, load_paired_data, read_pair_split
from .shapes_restore import BUNDLED_NAMES, ensure_shapes_restore
from .validator import evaluate_restoration

if TYPE_CHECKING:
    from ...data.cache_store import CacheSetting
    from ..base import ModelView

log = logging.getLogger(__name__)

RESTORE_AUGMENTATIONS = frozenset({"fliplr"})


class RestoreTask(Task):
    name: ClassVar[str] = "restore"
    fitness_name: ClassVar[str] = "PSNR"
    results_field: ClassVar[str] = "image"
    augmentations: ClassVar[frozenset[str]] = RESTORE_AUGMENTATIONS
    reduced_decode: ClassVar[bool] = False  # the picture is restored at its own resolution
    val_artefacts: ClassVar[frozenset[str]] = frozenset({"plots"})  # val_batch*_pred.jpg: degraded, restored, clean

    def load_data(self, data: Any) -> PairedData:
        """A paired data.yaml path, a folder holding one, a dict, or the bundled ``"shapes-restore"``."""
        data = resolve_bundled(data, self.name, BUNDLED_NAMES, ensure_shapes_restore)
        return load_paired_data(data)

    def load_split(self, data: Any, split: str) -> PairSplit:
        return read_pair_split(self.load_data(data), split)

    def train_pipeline(self, index: Any, *, imgsz: int, batch_size: int, device: torch.device,
                       cfg: TrainOptions, workers: int) -> PairTrainPipeline:
        augment = cfg.augment()
        unused = augment.unused(self.augmentations)
        if unused:
            log.warning("%s: no effect on restoration training, which flips pairs left-right (fliplr) only",
                        ", ".join(unused))
        return PairTrainPipeline(index, imgsz=imgsz, batch_size=batch_size, device=device, fliplr=augment.fliplr,
                                 workers=workers, seed=cfg.seed)

    def val_pipeline(self, index: Any, *, imgsz: int, batch_size: int, device: torch.device, workers: int,
                     cache: CacheSetting) -> PairValPipeline:
        return PairValPipeline(index, batch_size=batch_size, device=device, workers=workers)

    def evaluate(self, model: ModelView, forward: Callable[[Tensor], Any], pipeline: Iterable[Batch], *,
                 settings: EvalSettings, progress: bool) -> TaskMetrics:
        return evaluate_restoration(model, forward, pipeline, half=settings.half, progress=progress,
                                    pictures=settings.save_dir if settings.plots else None)

    def empty_best(self) -> dict[str, float]:
        return {"PSNR": 0.0, "SSIM": 0.0}

    def postprocess_options(self, options: Mapping[str, Any]) -> None:
        """Restoration has no thresholds; ``classes`` would filter nothing, so it is refused."""
        if options.get("classes") is not None:
            raise ConfigError(f"classes={options['classes']} filters detections; a restoration model returns a "
                              "picture, so there is nothing to filter")
        return None

    def prepare(self, image: np.ndarray, imgsz: int) -> Prepared:
        """The picture as it is, ``float [3, H, W]`` in [0, 1]; ``info``: its ``(h, w)``."""
        tensor = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1).float().div_(255.0)
        return Prepared(tensor, (image.shape[0], image.shape[1]))

    def prepare_batch(self, images: Sequence[Tensor], imgsz: int, dtype: torch.dtype, device: torch.device,
                      orig_shapes: Sequence[tuple[int, int]] | None = None) -> tuple[Tensor, list[Any]]:
        """Whole pictures, not letterboxed: ``uint8 [B, 3, H, W]`` on ``device`` (scaled inside the
        network call). Pictures of different sizes in one batch are padded with zeros on the right
        and bottom to the largest (predict with ``batch=1``, the default, pads none)."""
        sizes = [(int(im.shape[0]), int(im.shape[1])) for im in images]
        h, w = max(s[0] for s in sizes), max(s[1] for s in sizes)
        batch = torch.zeros((len(images), 3, h, w), dtype=torch.uint8, device=device)
        for i, image in enumerate(images):
            batch[i, :, :sizes[i][0], :sizes[i][1]] = image.to(device, non_blocking=True).permute(2, 0, 1)
        return batch, list(sizes)

    def make_results(self, image: np.ndarray, name: str, names: dict[int, str], prediction: Any, info: Any,
                     speed: dict[str, float]) -> Results:
        h, w = info
        restored = prediction[:, :h, :w].float().cpu()
        return Results(image, name, names, speed=speed, contents={"image": RestoredImage(restored)})
