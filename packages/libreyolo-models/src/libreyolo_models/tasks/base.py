"""The task contract: what a task declares and the few verbs trainer, validator and predictor call.

A task (detect, classify, semantic, ...) owns everything shaped by its kind of target: the
dataset format and readers, the batches (targets schema, collate, augmentation), the metrics
and what "best" means, how an input image becomes the network's tensor, and what ``Results``
holds. Families say which tasks they implement; the trainer, validator, predictor and CLI ask
the model's task and never name one.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NoReturn, Protocol

import numpy as np
import torch
from torch import Tensor

from ..contract.family import Family
from ..errors import ConfigError

if TYPE_CHECKING:
    from ..data.augment_draws import AugmentConfig
    from ..data.cache_store import CacheSetting
    from .results import Results


class TrainOptions(Protocol):
    """What a task's training pipeline reads of the run's options (``train.settings.TrainConfig``
    provides them; tasks read no option they do not need and never import the train job)."""

    @property
    def seed(self) -> int: ...

    @property
    def gpu_augment(self) -> bool | Literal["auto"]: ...

    @property
    def cache(self) -> CacheSetting: ...

    @property
    def label_smoothing(self) -> float: ...

    def augment(self) -> AugmentConfig:
        """The geometric and colour augmentation of box and mask tasks."""

    def classify_augment(self) -> Any:
        """Classification's augmentation (crops, flips, RandAugment, mixup/CutMix)."""


class ModelView(Protocol):
    """What a task reads of a model while it evaluates: the classes and the family (its
    post-processing). Jobs pass their ``ModelHandle``; tasks never see the facade."""

    @property
    def nc(self) -> int: ...

    @property
    def names(self) -> dict[int, str]: ...

    @property
    def family(self) -> Family: ...


class TaskMetrics(Protocol):
    """What a task's validation returns."""

    @property
    def fitness(self) -> float:
        """The single number "best" maximises."""

    @property
    def n_images(self) -> int: ...

    def as_dict(self) -> dict[str, float]:
        """Headline numbers under their ``results.csv`` keys (``metrics/...``)."""

    def summary(self) -> str:
        """One log line."""

    def table(self) -> str:
        """A readable per-class table."""

    def best_fields(self) -> dict[str, float]:
        """The checkpoint's ``best_<name>`` values (upstream's schema names, e.g. ``mAP50_95``)."""


class Batch(Protocol):
    """A training or validation batch on its device: what every task's pipeline yields."""

    images: Tensor
    targets: Any


@dataclass(frozen=True)
class EvalSettings:
    """Validation settings; a task uses those that mean something for it (conf/iou: detect).

    ``save_dir``: where plots (``plots``) and ``predictions.json`` (``save_json``) go; None: no files.
    ``loss``: ``(images, targets) -> loss items`` on the validation batches, under ``loss_names``
    (training's validation passes the family's loss; see ``tasks.loss_meter``); None: no losses.
    """

    conf: float = 0.001
    iou: float = 0.7
    max_det: int = 300
    half: bool = False
    save_dir: Path | None = None
    plots: bool = False
    save_json: bool = False
    loss: Callable[[Tensor, Any], Tensor] | None = None
    loss_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class Prepared:
    """One input image as the network sees it, plus what maps predictions back to it."""

    tensor: Tensor          # float [3, S, S] in [0, 1]
    info: Any               # task-specific (detect: a LetterboxInfo)


class Task(abc.ABC):
    """One task's declarations (class attributes) and verbs."""

    name: ClassVar[str]
    fitness_name: ClassVar[str]          # how fitness is computed, for messages and checkpoints
    results_field: ClassVar[str]         # what Results carries: "boxes", "probs" or "masks"
    supports_multi_scale: ClassVar[bool] = False
    # train_pipeline may keep the training split's images on the device (data.device_cache);
    # autobatch then leaves their bytes out of the batch's memory budget.
    images_on_device: ClassVar[bool] = False
    # Device memory the GPU path's batch rendering holds beside the training step, per pixel of a
    # batch image (0: none worth counting); autobatch leaves it out of the step's budget.
    rendering_bytes_per_pixel: ClassVar[int] = 0
    augmentations: ClassVar[frozenset[str]] = frozenset()  # TrainConfig augmentation fields honoured
    # predict may hand prepare_batch a reduced decode of a large picture, with the picture's size
    # in orig_shapes (data.image_files.read_image_for): true for the letterboxing tasks.
    reduced_decode: ClassVar[bool] = True
    # train_pipeline / val_pipeline take ``rect=<stride>``: rectangular batches (``rect=True``): detect.
    supports_rect: ClassVar[bool] = False
    # the split's ``labels`` are per-object (class, box) rows whose class ``single_cls=True`` can
    # replace, and its config takes ``names`` (and ``nc``) anew: detect, segment, pose.
    supports_single_cls: ClassVar[bool] = False
    # evaluate averages ``EvalSettings.loss`` over the batches (``tasks.loss_meter``): training's
    # validation then passes the family's loss (``train.val_loss``).
    validation_losses: ClassVar[bool] = False
    # predict takes prompts (``points=``, ``labels=``, ``boxes=``, ``multimask_output=``): prompt-segment.
    prompted: ClassVar[bool] = False
    # The model predicts no classes of its own and validation takes the dataset's (prompt-segment:
    # one mask per ground-truth box), so ``val`` does not compare the class counts.
    classes_from_data: ClassVar[bool] = False
    # Why this task's models are not trained here (pretrained-only), said before any work; None: trainable.
    training_refusal: ClassVar[str | None] = None
    # What ``val(plots=True)`` / ``val(save_json=True)`` write for this task (``EvalSettings``); val
    # says so for the others instead of making an empty run folder.
    val_artefacts: ClassVar[frozenset[str]] = frozenset()

    # ------------------------------------------------------------------ data
    @abc.abstractmethod
    def load_data(self, data: Any) -> Any:
        """The dataset description (a path, a dict, a bundled name) -> its parsed config (has ``nc``, ``names``)."""

    @abc.abstractmethod
    def load_split(self, data: Any, split: str) -> Any:
        """One checked split of a parsed config: every item in it is usable; problems are logged."""

    def has_split(self, data: Any, split: str) -> bool:
        return bool(getattr(data, split, None))

    @abc.abstractmethod
    def train_pipeline(self, index: Any, *, imgsz: int, batch_size: int, device: torch.device,
                       cfg: TrainOptions, workers: int) -> TrainLoader:
        """Augmented training batches for this rank."""

    @abc.abstractmethod
    def val_pipeline(self, index: Any, *, imgsz: int, batch_size: int, device: torch.device, workers: int,
                     cache: CacheSetting) -> Iterable[Batch]:
        """Deterministic validation batches (sharded over ranks when distributed)."""

    # ------------------------------------------------------------------ validation
    @abc.abstractmethod
    def evaluate(self, model: ModelView, forward: Callable[[Tensor], Any], pipeline: Iterable[Batch], *,
                 settings: EvalSettings, progress: bool) -> TaskMetrics:
        """Metrics of ``forward`` over ``pipeline`` (the same result on every rank)."""

    @abc.abstractmethod
    def empty_best(self) -> dict[str, float]:
        """The checkpoint's ``best_*`` fields before any validation (``best_fields``'s keys, at 0)."""

    # ------------------------------------------------------------------ prediction
    @abc.abstractmethod
    def postprocess_options(self, options: Mapping[str, Any]) -> Any:
        """The family ``postprocess`` options from predict settings (conf, iou, classes...)."""

    @abc.abstractmethod
    def prepare(self, image: np.ndarray, imgsz: int) -> Prepared:
        """RGB uint8 ``[H, W, 3]`` -> the network input and the mapping back (CPU reference path)."""

    def prepare_batch(self, images: Sequence[Tensor], imgsz: int, dtype: torch.dtype, device: torch.device,
                      orig_shapes: Sequence[tuple[int, int]] | None = None) -> tuple[Tensor, list[Any]]:
        """Predict's preprocessing: ``uint8 [H, W, 3]`` RGB tensors (on the host, pinned on CUDA; or
        already on ``device``, decoded there by ``predict.gpu_jpeg`` when the task has
        ``reduced_decode``; sizes may differ) -> the network input ``[B, 3, S, S]`` on ``device`` and per image what
        ``make_results`` needs to map back. The input is either ``dtype`` in [0, 1] or uint8
        pixels, which ``ModelHandle.inference_forward`` scales inside the network call (so a CUDA
        graph captures the scaling and keeps a uint8 copy of its input, not a float one). The
        default uploads the uint8 pixels and letterboxes them there, as validation does
        (``data.letterbox_images.letterbox_pixels``). ``orig_shapes``: each image's picture size: its
        own, or the full size a reduced decode came from (``reduced_decode`` tasks only)."""
        from ..data.letterbox_images import letterbox_pixels

        return letterbox_pixels([image.to(device, non_blocking=True) for image in images], imgsz, orig_shapes)

    def predictions_to_host(self, predictions: Any) -> Any:
        """A batch's post-processed predictions, moved to the CPU if the task's results live
        there (one copy for the whole batch); the default leaves them where they are."""
        return predictions

    @abc.abstractmethod
    def make_results(self, image: np.ndarray, name: str, names: dict[int, str], prediction: Any, info: Any,
                     speed: dict[str, float]) -> Results:
        """One image's ``Results`` from the family's post-processed prediction."""


class PretrainedOnlyTask(Task):
    """A task whose models are not trained here: subclasses set ``training_refusal`` (said before
    any work, by the training entry) and get a ``train_pipeline`` that says it again."""

    def train_pipeline(self, index: Any, *, imgsz: int, batch_size: int, device: torch.device,
                       cfg: TrainOptions, workers: int) -> NoReturn:
        raise ConfigError(self.training_refusal or f"the {self.name} task is pretrained-only here")


class TrainLoader(Protocol):
    """What ``Task.train_pipeline`` returns: batches per epoch, reseeded per epoch."""

    def __len__(self) -> int: ...

    def __iter__(self) -> Any: ...

    def set_epoch(self, epoch: int, *, mosaic: bool) -> None: ...
