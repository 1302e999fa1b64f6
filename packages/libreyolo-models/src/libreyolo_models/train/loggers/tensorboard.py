"""TensorBoard: scalars every ``log_every`` batches and per epoch, prediction images per epoch.

Event files go into the run folder itself, so ``tensorboard --logdir runs/train`` shows every run.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

from ...optional import preload_triton
from ..callbacks import EpochEnd, PredictionImages, StepEnd, TrainEnd, TrainStart
from .base import ServiceLogger, scalar_metrics


class TensorBoardLogger(ServiceLogger):
    name = "tensorboard"
    module = "torch.utils.tensorboard"
    package = "tensorboard"
    extra = "tensorboard"
    wants_prediction_images = True

    def _import(self) -> ModuleType | None:
        # torch.utils.tensorboard imports TensorFlow when it is installed (the [tflite] extra), and
        # Triton loaded after TensorFlow aborts the process: Triton first (optional.preload_triton).
        preload_triton()
        return super()._import()

    def on_start(self, event: TrainStart) -> None:
        self.writer = self.lib.SummaryWriter(log_dir=str(event.run_dir))
        self.writer.add_text("config", "\n".join(f"    {k}: {v}" for k, v in event.config.items()), 0)

    def on_step(self, event: StepEnd) -> None:
        for key, value in {**event.losses, **event.lr}.items():
            self.writer.add_scalar(f"step/{key}", value, event.step)

    def on_images(self, event: PredictionImages) -> None:
        for name, image in event.images.items():
            self.writer.add_image(f"predictions/{name}", np.ascontiguousarray(image), event.epoch + 1,
                                  dataformats="HWC")

    def on_epoch(self, event: EpochEnd) -> None:
        for key, value in scalar_metrics(event.metrics).items():
            self.writer.add_scalar(key, value, event.epoch + 1)
        self.writer.flush()

    def on_end(self, event: TrainEnd) -> None:
        self.close_quietly()

    def close_quietly(self) -> None:
        writer = getattr(self, "writer", None)
        if writer is not None:
            try:
                writer.close()
            except Exception:  # noqa: BLE001, S110 - closing after a failure; nothing left to report
                pass
