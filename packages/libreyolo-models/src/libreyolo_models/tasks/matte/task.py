"""Alpha matting: a soft foreground alpha per picture (``Results.masks``), MAE / S-measure / maxF.

Data: a YAML naming, per split, a folder of pictures (``input``) and a folder of their alpha
mattes (``target``, grey images of the same size and name), read by the paired reader the
restore task uses (``tasks.restore.reader``), or the bundled ``"shapes-matte"``. Every picture is
resized to ``imgsz x imgsz`` for the network, whatever its aspect ratio, as the official BiRefNet
inference does (``tasks.matte.resize``); the family's ``inference_forward`` returns the alpha
``float [B, S, S]`` in [0, 1]; ``Results.masks`` holds it resized back to the picture
(``AlphaMatte``: ``save`` writes the RGBA cut-out and the alpha). Training batches: pictures and
alphas resized alike, flipped left-right (targets ``float32 [B, 1, S, S]``). Fitness is the
S-measure.
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
from ..restore.reader import PairedData, PairSplit, load_paired_data, read_pair_split
from ..results import Results
from .alpha import AlphaMatte
from .pipeline import MatteTrainPipeline, MatteValPipeline
from .resize import alpha_to_picture, to_network
from .shapes_matte import BUNDLED_NAMES, ensure_shapes_matte
from .validator import evaluate_matte

if TYPE_CHECKING:
    from ...data.cache_store import CacheSetting
    from ..base import ModelView

log = logging.getLogger(__name__)

MATTE_AUGMENTATIONS = frozenset({"fliplr"})


class MatteTask(Task):
    name: ClassVar[str] = "matte"
    fitness_name: ClassVar[str] = "S-measure"
    results_field: ClassVar[str] = "masks"
    augmentations: ClassVar[frozenset[str]] = MATTE_AUGMENTATIONS
    reduced_decode: ClassVar[bool] = False  # resized from the full picture, and cut out at full size
    val_artefacts: ClassVar[frozenset[str]] = frozenset({"plots"})  # val_batch*_pred.jpg: picture, alpha, truth

    def load_data(self, data: Any) -> PairedData:
        """A matte data.yaml (``input``: pictures, ``target``: alphas), a folder holding one, a dict,
        or the bundled ``"shapes-matte"``."""
        data = resolve_bundled(data, self.name, BUNDLED_NAMES, ensure_shapes_matte)
        return load_paired_data(data, bundled="shapes-matte")

    def load_split(self, data: Any, split: str) -> PairSplit:
        return read_pair_split(self.load_data(data), split)

    def train_pipeline(self, index: Any, *, imgsz: int, batch_size: int, device: torch.device,
                       cfg: TrainOptions, workers: int) -> MatteTrainPipeline:
        augment = cfg.augment()
        unused = augment.unused(self.augmentations)
        if unused:
            log.warning("%s: no effect on matte training, which flips pictures and alphas left-right (fliplr) only",
                        ", ".join(unused))
        return MatteTrainPipeline(index, imgsz=imgsz, batch_size=batch_size, device=device, fliplr=augment.fliplr,
                                  workers=workers, seed=cfg.seed)

    def val_pipeline(self, index: Any, *, imgsz: int, batch_size: int, device: torch.device, workers: int,
                     cache: CacheSetting) -> MatteValPipeline:
        return MatteValPipeline(index, imgsz=imgsz, batch_size=batch_size, device=device, workers=workers)

    def evaluate(self, model: ModelView, forward: Callable[[Tensor], Any], pipeline: Iterable[Batch], *,
                 settings: EvalSettings, progress: bool) -> TaskMetrics:
        return evaluate_matte(model, forward, pipeline, half=settings.half, progress=progress,
                              pictures=settings.save_dir if settings.plots else None)

    def empty_best(self) -> dict[str, float]:
        return {"S-measure": 0.0, "MAE": 1.0, "maxF": 0.0}

    def postprocess_options(self, options: Mapping[str, Any]) -> None:
        """A matte has no thresholds; ``classes`` would filter nothing, so it is refused."""
        if options.get("classes") is not None:
            raise ConfigError(f"classes={options['classes']} filters detections; a matting model returns one alpha "
                              "matte per picture, so there is nothing to filter")
        return None

    def prepare(self, image: np.ndarray, imgsz: int) -> Prepared:
        """The picture resized to ``imgsz x imgsz``, ``float [3, S, S]`` in [0, 1]; ``info``: its ``(h, w)``."""
        tensor = to_network(torch.from_numpy(np.ascontiguousarray(image)), imgsz, torch.device("cpu"))
        return Prepared(tensor, (image.shape[0], image.shape[1]))

    def prepare_batch(self, images: Sequence[Tensor], imgsz: int, dtype: torch.dtype, device: torch.device,
                      orig_shapes: Sequence[tuple[int, int]] | None = None) -> tuple[Tensor, list[Any]]:
        """Each picture resized on ``device`` to ``imgsz x imgsz`` (``float [B, 3, S, S]`` in [0, 1],
        in ``dtype``); ``infos``: each picture's ``(h, w)``."""
        sizes = [(int(im.shape[0]), int(im.shape[1])) for im in images]
        batch = torch.stack([to_network(image, imgsz, device) for image in images])
        return batch.to(dtype), sizes

    def make_results(self, image: np.ndarray, name: str, names: dict[int, str], prediction: Any, info: Any,
                     speed: dict[str, float]) -> Results:
        alpha = alpha_to_picture(prediction, info).float().cpu()
        return Results(image, name, names, speed=speed, masks=AlphaMatte(alpha))
