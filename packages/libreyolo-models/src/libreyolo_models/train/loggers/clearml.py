"""ClearML: settings as the task's configuration, losses every ``log_every`` batches, metrics and
prediction images per epoch, the run's plots (debug samples) and tables (artifacts) at the end.

Against a server when one is configured (``clearml-init``'s ``~/clearml.conf``,
``CLEARML_CONFIG_FILE`` or the ``CLEARML_API_*`` variables); otherwise, or with
``CLEARML_OFFLINE_MODE=1``, an offline session on disk (ClearML's cache folder; import it later
with ``Task.import_offline_session``), so a run never falls back to a public server unasked.
ClearML's automatic framework hooks are off: this logger reports what the run reports, once.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from ..callbacks import EpochEnd, PredictionImages, StepEnd, TrainEnd, TrainException, TrainStart
from .base import ServiceLogger, run_files, scalar_metrics

log = logging.getLogger(__name__)


def clearml_offline() -> bool:
    if os.environ.get("CLEARML_OFFLINE_MODE", "").strip().lower() in ("1", "true", "yes", "on"):
        return True
    configured = (os.environ.get("CLEARML_API_ACCESS_KEY") or os.environ.get("CLEARML_CONFIG_FILE")
                  or (Path.home() / "clearml.conf").is_file())
    return not configured


class ClearMLLogger(ServiceLogger):
    name = "clearml"
    module = "clearml"
    extra = "clearml"
    wants_prediction_images = True

    def on_start(self, event: TrainStart) -> None:
        task_class = self.lib.Task
        if clearml_offline():
            task_class.set_offline(offline_mode=True)
            # Offline, the repository link has no server to serve it; its detection (git, uncommitted
            # diff, import scan) took 15 s to 5 min here and Task.close waits up to 300 s for it.
            task_class.force_store_standalone_script(True)
            log.info("clearml: no server configured (or CLEARML_OFFLINE_MODE=1): an offline session, to import later")
        project = os.environ.get("CLEARML_PROJECT") or Path(self.cfg.project).name or "libreyolo"
        self.task = task_class.init(project_name=project, task_name=Path(event.run_dir).name, reuse_last_task_id=False,
                                    auto_connect_frameworks=False, auto_connect_arg_parser=False,
                                    auto_resource_monitoring=False, auto_connect_streams=False)
        self.task.connect({k: v if isinstance(v, int | float | str | bool) else str(v)
                           for k, v in event.config.items()}, name="train")
        self.report = self.task.get_logger()

    def on_step(self, event: StepEnd) -> None:
        for key, value in {**event.losses, **event.lr}.items():
            self.report.report_scalar("step", key, value, iteration=event.step)

    def on_images(self, event: PredictionImages) -> None:
        for name, image in event.images.items():
            self.report.report_image("predictions", name, iteration=event.epoch + 1, image=image)

    def on_epoch(self, event: EpochEnd) -> None:
        for key, value in scalar_metrics(event.metrics).items():
            title, _, series = key.rpartition("/")
            self.report.report_scalar(title or key, series, value, iteration=event.epoch + 1)

    def on_end(self, event: TrainEnd) -> None:
        for path in run_files(event.run_dir):
            if path.suffix in (".png", ".jpg"):
                self.report.report_image("plots", path.stem, iteration=0, local_path=str(path))
            else:
                self.task.upload_artifact(path.name, artifact_object=str(path))
        self.task.close()
        self.task = None

    def on_exception(self, event: TrainException) -> None:
        task = getattr(self, "task", None)
        if task is not None:
            task.mark_failed(status_reason=event.error)
        self.close_quietly()

    def close_quietly(self) -> None:
        task = getattr(self, "task", None)
        if task is not None:
            try:
                task.close()
            except Exception:  # noqa: BLE001, S110 - closing after a failure; nothing left to report
                pass
            self.task = None
