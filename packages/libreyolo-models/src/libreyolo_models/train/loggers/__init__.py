"""Experiment loggers (TensorBoard, MLflow, Weights & Biases, Comet, ClearML, DVCLive) as
training callbacks.

Each is switched on by a ``TrainConfig`` flag (``tensorboard=True``, ``mlflow=True``,
``wandb=True``, ``comet=True``, ``clearml=True``, ``dvclive=True``), lives in an optional extra of libreyolo-models, runs on rank 0 only, and never
ends a run: a missing package or an unreachable service is one warning, then training goes on
without that logger. More loggers are plain callbacks (see ``train.callbacks``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import ServiceLogger
from .clearml import ClearMLLogger
from .comet import CometLogger
from .dvclive import DVCLiveLogger
from .mlflow import MLflowLogger
from .tensorboard import TensorBoardLogger
from .wandb import WandbLogger

if TYPE_CHECKING:
    from ..settings import TrainConfig

# TrainConfig flag -> the logger it switches on.
LOGGERS: dict[str, type[ServiceLogger]] = {
    "tensorboard": TensorBoardLogger,
    "mlflow": MLflowLogger,
    "wandb": WandbLogger,
    "comet": CometLogger,
    "clearml": ClearMLLogger,
    "dvclive": DVCLiveLogger,
}


def enabled_loggers(cfg: TrainConfig) -> list[ServiceLogger]:
    """The loggers ``cfg`` switches on (each checks its package when the run starts)."""
    return [cls(cfg) for flag, cls in LOGGERS.items() if getattr(cfg, flag)]


__all__ = ["LOGGERS", "ClearMLLogger", "CometLogger", "DVCLiveLogger", "MLflowLogger", "ServiceLogger",
           "TensorBoardLogger", "WandbLogger", "enabled_loggers"]
