"""Weights & Biases: settings as the run config, losses every ``log_every`` batches, metrics and
prediction images per epoch, the run's plots at the end.

W&B's own environment variables apply (``WANDB_MODE=offline`` writes the run to disk only,
``WANDB_DIR``, ``WANDB_PROJECT``, ``WANDB_API_KEY``). Without a login and not offline, ``wandb``
refuses to start: one warning, and the run goes on.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..callbacks import EpochEnd, PredictionImages, StepEnd, TrainEnd, TrainException, TrainStart
from .base import ServiceLogger, run_files, scalar_metrics


class WandbLogger(ServiceLogger):
    name = "wandb"
    module = "wandb"
    extra = "wandb"
    wants_prediction_images = True

    def on_start(self, event: TrainStart) -> None:
        project = os.environ.get("WANDB_PROJECT") or Path(self.cfg.project).name or "libreyolo"
        self.run = self.lib.init(project=project.replace("/", "-"), name=Path(event.run_dir).name,
                                 dir=os.environ.get("WANDB_DIR") or str(event.run_dir), config=event.config,
                                 reinit="finish_previous")

    def on_step(self, event: StepEnd) -> None:
        self.run.log({"step/step": event.step, **{f"step/{k}": v for k, v in {**event.losses, **event.lr}.items()}})

    def on_images(self, event: PredictionImages) -> None:
        self.run.log({"epoch": event.epoch + 1,
                      **{f"predictions/{name}": self.lib.Image(image) for name, image in event.images.items()}})

    def on_epoch(self, event: EpochEnd) -> None:
        self.run.log({"epoch": event.epoch + 1, **scalar_metrics(event.metrics)})

    def on_end(self, event: TrainEnd) -> None:
        files = [p for p in run_files(event.run_dir) if p.suffix in (".png", ".jpg")]
        if files:
            self.run.log({f"plots/{p.stem}": self.lib.Image(str(p)) for p in files})
        self.run.summary.update(scalar_metrics(event.final_metrics))
        self.run.finish()
        self.run = None

    def on_exception(self, event: TrainException) -> None:
        self.close_quietly()

    def close_quietly(self) -> None:
        run = getattr(self, "run", None)
        if run is not None:
            try:
                run.finish(exit_code=1)
            except Exception:  # noqa: BLE001, S110 - closing after a failure; nothing left to report
                pass
            self.run = None
