"""The base of a task whose families are pretrained-only here (depth): every
data, training and validation verb refuses with the task's own message, so ``train``, ``val`` and
the dataset check stop before any work with a line that says what to do instead."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

import torch
from torch import Tensor

from ..errors import ConfigError
from .base import Batch, EvalSettings, Task, TaskMetrics, TrainOptions

if TYPE_CHECKING:
    from ..data.cache_store import CacheSetting
    from .base import ModelView


class PredictOnlyTask(Task):
    """A task that predicts only; ``predict_only`` is the refusal every other verb raises."""

    fitness_name: ClassVar[str] = "none (inference only)"
    predict_only: ClassVar[str]
    """Why there is no dataset, training or validation, and what to use instead."""

    def refuse(self) -> NoReturn:
        raise ConfigError(self.predict_only)

    def load_data(self, data: Any) -> Any:
        self.refuse()

    def load_split(self, data: Any, split: str) -> Any:
        self.refuse()

    def train_pipeline(self, index: Any, *, imgsz: int, batch_size: int, device: torch.device,
                       cfg: TrainOptions, workers: int) -> Any:
        self.refuse()

    def val_pipeline(self, index: Any, *, imgsz: int, batch_size: int, device: torch.device, workers: int,
                     cache: CacheSetting) -> Iterable[Batch]:
        self.refuse()

    def evaluate(self, model: ModelView, forward: Callable[[Tensor], Any], pipeline: Iterable[Batch], *,
                 settings: EvalSettings, progress: bool) -> TaskMetrics:
        self.refuse()

    def empty_best(self) -> dict[str, float]:
        return {}
