"""The ``count`` task: YOLO-format data (the label rows are what is counted), mean absolute error,
and ``Results.count`` (its own content type)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from libreyolo_models.data.image_files import read_image
from libreyolo_models.data.letterbox_images import letterbox
from libreyolo_models.tasks import EvalSettings, Prepared, Task
from libreyolo_models.tasks.base import ModelView, TrainOptions
from libreyolo_models.tasks.detect.datasets import load_split, resolve_dataset
from libreyolo_models.tasks.results import Results


@dataclass
class CountBatch:
    images: Tensor
    targets: Tensor


class CountLoader:
    """Letterboxed images with their object counts, shuffled per epoch (no augmentation)."""

    def __init__(self, index: Any, *, imgsz: int, batch_size: int, device: torch.device, seed: int,
                 shuffle: bool) -> None:
        self.images = [letterbox(read_image(path), imgsz)[0] for path in index.images]
        self.counts = torch.tensor([float(len(labels)) for labels in index.labels])
        self.batch_size, self.device, self.seed, self.shuffle, self.epoch = batch_size, device, seed, shuffle, 0

    def __len__(self) -> int:
        return (len(self.images) + self.batch_size - 1) // self.batch_size

    def set_epoch(self, epoch: int, *, mosaic: bool) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[CountBatch]:
        order = (torch.randperm(len(self.images), generator=torch.Generator().manual_seed(self.seed + self.epoch))
                 if self.shuffle else torch.arange(len(self.images)))
        for chunk in order.split(self.batch_size):
            yield CountBatch(torch.stack([self.images[i] for i in chunk]).to(self.device), self.counts[chunk])


@dataclass(frozen=True)
class CountMetrics:
    mae: float
    n_images: int

    @property
    def fitness(self) -> float:
        return -self.mae

    def as_dict(self) -> dict[str, float]:
        return {"metrics/mae": self.mae}

    def summary(self) -> str:
        return f"MAE {self.mae:.3f} over {self.n_images} images"

    def table(self) -> str:
        return self.summary()

    def best_fields(self) -> dict[str, float]:
        return {"mae": self.mae}


class Count:
    """``Results.count``: the predicted number of objects (a ``ResultContent``)."""

    csv_columns = ("count",)

    def __init__(self, value: float) -> None:
        self.value = value

    def rows(self, names: dict[int, str]) -> list[dict[str, object]]:
        return [{"count": self.value}]

    def summary(self, names: dict[int, str]) -> str:
        return f"{self.value:.1f} objects"

    def plot(self, image: np.ndarray, names: dict[int, str], *, labels: bool, conf: bool) -> np.ndarray:
        return image.copy()

    def to(self, device: str | torch.device) -> Count:
        return self

    def numpy(self) -> Count:
        return self

    def __len__(self) -> int:
        return 1


class CountTask(Task):
    name: ClassVar[str] = "count"
    fitness_name: ClassVar[str] = "-MAE"
    results_field: ClassVar[str] = "count"
    reduced_decode: ClassVar[bool] = False

    def load_data(self, data: Any) -> Any:
        return resolve_dataset(data)

    def load_split(self, data: Any, split: str) -> Any:
        return load_split(data, split)

    def train_pipeline(self, index: Any, *, imgsz: int, batch_size: int, device: torch.device, cfg: TrainOptions,
                       workers: int) -> CountLoader:
        return CountLoader(index, imgsz=imgsz, batch_size=batch_size, device=device, seed=cfg.seed, shuffle=True)

    def val_pipeline(self, index: Any, *, imgsz: int, batch_size: int, device: torch.device, workers: int,
                     cache: Any) -> CountLoader:
        return CountLoader(index, imgsz=imgsz, batch_size=batch_size, device=device, seed=0, shuffle=False)

    def evaluate(self, model: ModelView, forward: Callable[[Tensor], Any], pipeline: Iterable[Any], *,
                 settings: EvalSettings, progress: bool) -> CountMetrics:
        errors: list[float] = []
        with torch.no_grad():
            for batch in pipeline:
                counts = model.family.postprocess(forward(batch.images), None)
                errors += [abs(float(c) - float(t)) for c, t in zip(counts, batch.targets)]
        return CountMetrics(sum(errors) / max(1, len(errors)), len(errors))

    def empty_best(self) -> dict[str, float]:
        return {"mae": 0.0}

    def postprocess_options(self, options: Mapping[str, Any]) -> None:
        return None

    def prepare(self, image: np.ndarray, imgsz: int) -> Prepared:
        tensor, info = letterbox(image, imgsz)
        return Prepared(tensor, info)

    def make_results(self, image: np.ndarray, name: str, names: dict[int, str], prediction: Any, info: Any,
                     speed: dict[str, float]) -> Results:
        return Results(image, name, names, speed=speed, contents={"count": Count(float(prediction))})
