"""MLflow: the run's settings as parameters, metrics per epoch (and losses every ``log_every``
batches), the run's plots and tables as artefacts at the end.

Where runs go: ``MLFLOW_TRACKING_URI`` when set (a server, ``sqlite:///...``, a folder); else a
local file store in ``<project>/mlflow`` beside the run folders (MLflow calls the file store
"maintenance mode" and needs ``MLFLOW_ALLOW_FILE_STORE=true``, which we set for that case only).
The experiment is ``MLFLOW_EXPERIMENT_NAME`` or the project; the run is named after the run folder.
An http(s) server is probed first (2 s), so a server that is down costs one warning, not MLflow's
minutes of retries.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlparse

from ..callbacks import EpochEnd, StepEnd, TrainEnd, TrainException, TrainStart
from .base import ServiceLogger, run_files, scalar_metrics

_PROBE_TIMEOUT_S = 2.0


def check_reachable(uri: str) -> None:
    """Raise ``ConnectionError`` naming ``uri`` when an http(s) tracking server does not answer."""
    parsed = urlparse(uri)
    if parsed.scheme not in ("http", "https"):
        return
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((parsed.hostname or "localhost", port), timeout=_PROBE_TIMEOUT_S):
            pass
    except OSError as err:
        raise ConnectionError(f"MLflow tracking server {uri} is not reachable ({err}); check "
                              "MLFLOW_TRACKING_URI or start the server") from err


class MLflowLogger(ServiceLogger):
    name = "mlflow"
    module = "mlflow"
    extra = "mlflow"

    def on_start(self, event: TrainStart) -> None:
        mlflow = self.lib
        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            uri = (Path(self.cfg.project).resolve() / "mlflow").as_uri()
        check_reachable(uri)
        mlflow.set_tracking_uri(uri)
        mlflow.set_experiment(os.environ.get("MLFLOW_EXPERIMENT_NAME") or Path(self.cfg.project).name or "libreyolo")
        self.run = mlflow.start_run(run_name=Path(event.run_dir).name)
        mlflow.log_params({k: str(v)[:500] for k, v in event.config.items()})  # MLflow caps param length

    def on_step(self, event: StepEnd) -> None:
        self.lib.log_metrics({f"step/{k}": v for k, v in {**event.losses, **event.lr}.items()}, step=event.step)

    def on_epoch(self, event: EpochEnd) -> None:
        self.lib.log_metrics(scalar_metrics(event.metrics), step=event.epoch + 1)

    def on_end(self, event: TrainEnd) -> None:
        for path in run_files(event.run_dir):
            self.lib.log_artifact(str(path))
        self.lib.end_run()
        self.run = None

    def on_exception(self, event: TrainException) -> None:
        if getattr(self, "run", None) is not None:
            self.lib.end_run(status="FAILED")
            self.run = None

    def close_quietly(self) -> None:
        if getattr(self, "run", None) is not None:
            try:
                self.lib.end_run(status="FAILED")
            except Exception:  # noqa: BLE001, S110 - closing after a failure; nothing left to report
                pass
            self.run = None
