"""Comet: settings as parameters, losses every ``log_every`` batches, metrics and prediction
images per epoch, the run's plots and tables as assets at the end.

Online when ``COMET_API_KEY`` is set (Comet's own variables apply: ``COMET_WORKSPACE``,
``COMET_PROJECT_NAME``...); otherwise, or with ``COMET_MODE=offline``, an offline experiment: a
zip in ``COMET_OFFLINE_DIRECTORY`` (default ``<run folder>/comet``) that ``comet upload`` sends
later. So a machine without an account or a network never waits on Comet.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..callbacks import EpochEnd, PredictionImages, StepEnd, TrainEnd, TrainStart
from .base import ServiceLogger, run_files, scalar_metrics


def comet_online() -> bool:
    mode = os.environ.get("COMET_MODE", "").strip().lower()
    if mode in ("offline", "disabled"):
        return False
    return mode == "online" or bool(os.environ.get("COMET_API_KEY"))


class CometLogger(ServiceLogger):
    name = "comet"
    module = "comet_ml"
    package = "comet-ml"
    extra = "comet"
    wants_prediction_images = True

    def on_start(self, event: TrainStart) -> None:
        comet = self.lib
        online = comet_online()
        folder = os.environ.get("COMET_OFFLINE_DIRECTORY") or str(Path(event.run_dir) / "comet")
        project = os.environ.get("COMET_PROJECT_NAME") or Path(self.cfg.project).name or "libreyolo"
        # An online run gets the folder too: when the connection drops, comet_ml's fallback
        # streamer writes its offline copy there instead of into the working directory.
        config = comet.ExperimentConfig(name=Path(event.run_dir).name, offline_directory=folder,
                                        log_code=False, log_graph=False, parse_args=False, auto_output_logging=False,
                                        auto_metric_logging=False, auto_param_logging=False, log_env_gpu=False,
                                        display_summary_level=0)
        self.exp = comet.start(project_name=project.replace("/", "-"), online=online, experiment_config=config)
        self.exp.log_parameters({k: v if isinstance(v, int | float | str | bool) else str(v)
                                 for k, v in event.config.items()})

    def on_step(self, event: StepEnd) -> None:
        self.exp.log_metrics({f"step/{k}": v for k, v in {**event.losses, **event.lr}.items()}, step=event.step)

    def on_images(self, event: PredictionImages) -> None:
        for name, image in event.images.items():
            self.exp.log_image(image, name=f"predictions/{name}", step=event.epoch + 1)

    def on_epoch(self, event: EpochEnd) -> None:
        self.exp.log_metrics(scalar_metrics(event.metrics), step=event.epoch + 1, epoch=event.epoch + 1)

    def on_end(self, event: TrainEnd) -> None:
        for path in run_files(event.run_dir):
            if path.suffix in (".png", ".jpg"):
                self.exp.log_image(str(path), name=f"plots/{path.stem}")
            else:
                self.exp.log_asset(str(path))
        self.exp.log_metrics({f"final/{k}": v for k, v in scalar_metrics(event.final_metrics).items()})
        self.exp.end()
        self.exp = None

    def close_quietly(self) -> None:
        exp = getattr(self, "exp", None)
        if exp is not None:
            try:
                exp.end()
            except Exception:  # noqa: BLE001, S110 - closing after a failure; nothing left to report
                pass
            self.exp = None
