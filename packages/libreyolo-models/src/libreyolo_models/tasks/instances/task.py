"""What the instance tasks' ``Task`` classes share (segment, pose, and a third such as oriented
boxes): the bundled-set lookup, the split's existence check, and predict's detection-style
options, letterbox and host copy. Each task declares its names and reads its own data."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ...data.augment_draws import AugmentConfig
from ...data.errors import EmptySplitError
from ..base import EvalSettings, ModelView, Prepared, Task
from ..bundled_sets import resolve_bundled
from ..detect.task import DetectOptions, detect_options, letterbox_prepared
from .artefacts import InstanceArtefacts


class InstanceTask(Task):
    """A task of objects with boxes plus one extra per box (``carries``: masks, keypoints)."""

    supports_multi_scale: ClassVar[bool] = False
    augmentations: ClassVar[frozenset[str]] = frozenset(AugmentConfig.__dataclass_fields__)
    validation_losses: ClassVar[bool] = True
    supports_single_cls: ClassVar[bool] = True  # objects keep their masks / keypoints, one class
    val_artefacts: ClassVar[frozenset[str]] = frozenset({"plots", "save_json"})  # instances.artefacts
    carries: ClassVar[str]
    """What each object has besides its box, for messages ("masks", "keypoints")."""
    bundled_names: ClassVar[tuple[str, ...]]
    """``data=`` names of the task's bundled set; the first is the one messages suggest."""

    @abstractmethod
    def ensure_bundled(self) -> Path:
        """The bundled set's data.yaml, generated on first use."""

    @abstractmethod
    def read_config(self, data: Any) -> Any:
        """A data.yaml path, a folder holding one or a dict -> the task's data config."""

    def load_data(self, data: Any) -> Any:
        """A data.yaml path, a folder holding one, a dict, or one of ``bundled_names``."""
        data = resolve_bundled(data, self.name, self.bundled_names, self.ensure_bundled)
        return self.read_config(data)

    def artefacts(self, model: ModelView, settings: EvalSettings) -> InstanceArtefacts | None:
        """What ``val(plots=True)`` / ``val(save_json=True)`` collect (``instances.artefacts``), or None."""
        if settings.save_dir is None or not (settings.plots or settings.save_json):
            return None
        return InstanceArtefacts(model.nc, model.names, settings.save_dir, plots=settings.plots,
                                 save_json=settings.save_json, kind="Mask" if self.carries == "masks" else "Pose")

    def checked_config(self, data: Any, split: str) -> Any:
        """``load_data(data)``, after checking that every path of ``split`` exists."""
        config = self.load_data(data)
        for entry in config.split_paths(split):
            if not entry.exists():
                raise EmptySplitError(f"{split}: {entry} does not exist (from {split!r} in {config.source})")
        return config

    def empty_best(self) -> dict[str, float]:
        return {"mAP50": 0.0, "mAP50_95": 0.0}

    def postprocess_options(self, options: Mapping[str, Any]) -> DetectOptions:
        return detect_options(options)

    def prepare(self, image: np.ndarray, imgsz: int) -> Prepared:
        return letterbox_prepared(image, imgsz)

    def predictions_to_host(self, predictions: Any) -> Any:
        """Every image's ``InstancePrediction`` on the CPU."""
        return [p.to("cpu") for p in predictions]
