"""DVCLive: settings as ``params.yaml``, metrics per epoch (one DVCLive step per epoch) in
``metrics.json`` and ``plots/metrics``, prediction images per epoch, the run's plots at the end,
all in ``<run folder>/dvclive`` (``DVCLIVE_DIR`` to change it): plain files that ``dvc plots``
and DVC's VS Code extension read, no service. Losses every ``log_every`` batches are left out:
DVCLive's step is the epoch here, and mixing both would make its plots unreadable.

The run never changes the repository it sits in: DVCLive on its own runs ``dvc init`` in a git
repository without DVC (and stages ``.dvc/`` in git), then writes ``dvc.yaml`` at its root; here
no ``dvc.yaml`` is written and no DVC experiment is saved, and a repository that has no DVC yet is
left without one (a DVC repository that exists is used as DVCLive uses it).
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..callbacks import EpochEnd, PredictionImages, TrainEnd, TrainStart
from .base import ServiceLogger, run_files, scalar_metrics


class DVCLiveLogger(ServiceLogger):
    name = "dvclive"
    module = "dvclive"
    extra = "dvclive"
    wants_prediction_images = True

    def on_start(self, event: TrainStart) -> None:
        folder = os.environ.get("DVCLIVE_DIR") or str(Path(event.run_dir) / "dvclive")
        # no DVC experiment, no dvc.yaml, no `dvc init` (see the module docstring)
        with _existing_dvc_repo_only():
            self.live = self.lib.Live(dir=folder, save_dvc_exp=False, report=None, dvcyaml=None)
        self.live.log_params({k: v if isinstance(v, int | float | str | bool) or v is None else str(v)
                              for k, v in event.config.items()})

    def on_images(self, event: PredictionImages) -> None:
        for name, image in event.images.items():
            self.live.log_image(f"predictions/{name}.jpg", image)

    def on_epoch(self, event: EpochEnd) -> None:
        for key, value in scalar_metrics(event.metrics).items():
            self.live.log_metric(key, value)
        self.live.next_step()

    def on_end(self, event: TrainEnd) -> None:
        for path in run_files(event.run_dir):
            if path.suffix in (".png", ".jpg"):
                self.live.log_image(f"plots/{path.name}", path)
        self.live.end()
        self.live = None

    def close_quietly(self) -> None:
        live = getattr(self, "live", None)
        if live is not None:
            try:
                live.end()
            except Exception:  # noqa: BLE001, S110 - closing after a failure; nothing left to report
                pass
            self.live = None


@contextlib.contextmanager
def _existing_dvc_repo_only() -> Iterator[None]:
    """While DVCLive starts, its repository lookup finds a DVC repository that exists and never
    creates one (``dvclive.live.get_dvc_repo`` calls ``Repo.init`` in a plain git repository)."""
    live_module: Any = None
    try:
        live_module = importlib.import_module("dvclive.live")
        original = live_module.get_dvc_repo
    except Exception:  # noqa: BLE001 - another DVCLive layout (or a stand-in): nothing to guard
        live_module = None
    if live_module is None:
        yield
        return

    def existing() -> Any:
        not_dvc = importlib.import_module("dvc.exceptions").NotDvcRepoError
        no_scm = importlib.import_module("dvc.scm").SCMError
        try:
            return importlib.import_module("dvc.repo").Repo()
        except (not_dvc, no_scm):
            return None

    live_module.get_dvc_repo = existing
    try:
        yield
    finally:
        live_module.get_dvc_repo = original
