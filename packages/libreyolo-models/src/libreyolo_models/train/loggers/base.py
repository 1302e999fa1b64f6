"""What every built-in logger shares: event dispatch, the missing-extra message, and the rule
that a logger failing (package missing, service down, disk full) warns once and switches off
instead of ending the training run."""

from __future__ import annotations

import importlib
import logging
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar

from ..callbacks import EpochEnd, PredictionImages, StepEnd, TrainEnd, TrainException, TrainStart

if TYPE_CHECKING:
    from ..settings import TrainConfig

log = logging.getLogger(__name__)


class ServiceLogger:
    """Base of the built-in loggers; subclasses implement the ``on_*`` methods they need.

    ``module`` is imported when the run starts; if it is missing the user gets one warning that
    names the extra to install (``pip install libreyolo-models[<extra>]``).
    """

    name: ClassVar[str]
    module: ClassVar[str]
    extra: ClassVar[str]
    package: ClassVar[str | None] = None
    """The pip package that provides ``module``, when it is not ``module``'s top name (TensorBoard
    writes through ``torch.utils.tensorboard``, which needs the ``tensorboard`` package)."""
    wants_prediction_images: ClassVar[bool] = False

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        self.disabled = False
        self.lib: Any = None

    def __call__(self, event: object) -> None:
        if self.disabled:
            return
        try:
            if isinstance(event, TrainStart):
                self.lib = self._import()
                if self.lib is None:
                    return
                self.on_start(event)
            elif self.lib is None:
                return
            elif isinstance(event, StepEnd):
                self.on_step(event)
            elif isinstance(event, PredictionImages):
                self.on_images(event)
            elif isinstance(event, EpochEnd):
                self.on_epoch(event)
            elif isinstance(event, TrainEnd):
                self.on_end(event)
            elif isinstance(event, TrainException):
                self.on_exception(event)
        except Exception as err:  # noqa: BLE001 - a logger must never end a training run
            self.disabled = True
            log.warning("%s logging stopped, training goes on without it: %s: %s", self.name,
                        type(err).__name__, err)
            self.close_quietly()

    def _import(self) -> ModuleType | None:
        try:
            return importlib.import_module(self.module)
        except ImportError as err:
            self.disabled = True
            log.warning("%s=True but %s is not installed (%s); training goes on without it. Install it with: "
                        "pip install 'libreyolo-models[%s]'", self.name, self.package or self.module.split(".")[0], err,
                        self.extra)
            return None

    # Subclasses override what they use.
    def on_start(self, event: TrainStart) -> None: ...

    def on_step(self, event: StepEnd) -> None: ...

    def on_images(self, event: PredictionImages) -> None: ...

    def on_epoch(self, event: EpochEnd) -> None: ...

    def on_end(self, event: TrainEnd) -> None: ...

    def on_exception(self, event: TrainException) -> None:
        self.close_quietly()

    def close_quietly(self) -> None:
        """Release the writer or run; errors here are swallowed (we are already failing)."""


def scalar_metrics(values: dict[str, float]) -> dict[str, float]:
    """The numeric entries of a results row, minus the epoch counter (it is the x axis)."""
    return {k: float(v) for k, v in values.items() if k != "epoch" and isinstance(v, int | float)}


def run_files(run_dir: Any) -> list[Any]:
    """The plots and tables a finished run leaves in its folder, in a stable order."""
    from pathlib import Path

    root = Path(run_dir)
    names = ("results.csv", "results.png", "args.yaml", "labels.jpg", "confusion_matrix.png",
             "confusion_matrix_normalized.png", "PR_curve.png", "P_curve.png", "R_curve.png", "F1_curve.png")
    return ([root / n for n in names if (root / n).is_file()] + sorted(root.glob("train_batch*.jpg"))
            + sorted(root.glob("val_batch*.jpg")))
