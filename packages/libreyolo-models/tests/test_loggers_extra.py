"""Comet, ClearML and DVCLive loggers: each driven through a run's events against a stand-in of
its package (always), the failure rules (a missing extra, a service call that fails: one warning,
training goes on), and, where the extra is installed, a real offline training run read back from
what each wrote."""

from __future__ import annotations

import json
import logging
import sys
import types
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from libreyolo_models import LibreYOLO
from libreyolo_models.train.callbacks import EpochEnd, PredictionImages, StepEnd, TrainEnd, TrainStart
from libreyolo_models.train.loggers import LOGGERS, ClearMLLogger, CometLogger, DVCLiveLogger
from libreyolo_models.train.settings import TrainConfig


class Recorder:
    """A stand-in for a package: any attribute chain can be called; each call is recorded under
    its dotted path (``Task.init``), and returns a recorder whose calls extend it (``Task.init.close``)."""

    def __init__(self, calls: list[tuple[str, tuple, dict]], path: str = "") -> None:
        self._calls, self._path = calls, path

    def __getattr__(self, name: str) -> Recorder:
        return Recorder(self._calls, f"{self._path}.{name}" if self._path else name)

    def __call__(self, *args: Any, **kwargs: Any) -> Recorder:
        self._calls.append((self._path, args, kwargs))
        return Recorder(self._calls, self._path)


def _events(run_dir: Path) -> list[object]:
    (run_dir / "results.csv").write_text("epoch\n1\n")
    from PIL import Image

    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(run_dir / "val_batch0_pred.jpg")
    return [TrainStart(run_dir, epochs=1, start_epoch=0, config={"epochs": 1, "freeze": [1, 2]}),
            StepEnd(0, 0, {"train/box_loss": 1.0}, {"lr/pg0": 0.01}),
            PredictionImages(0, {"img0": np.zeros((8, 8, 3), np.uint8)}),
            EpochEnd(0, {"epoch": 1, "metrics/mAP50": 0.5, "val/box_loss": 2.0}, True, run_dir),
            TrainEnd(run_dir, None, None, 1, False, {"metrics/mAP50": 0.5})]


@pytest.fixture()
def stand_in(monkeypatch):
    """Install a recording stand-in for a logger's package; returns its calls."""
    def install(module: str) -> list[tuple[str, tuple, dict]]:
        calls: list[tuple[str, tuple, dict]] = []
        fake = types.ModuleType(module)
        recorder = Recorder(calls)
        fake.__getattr__ = lambda name: getattr(recorder, name)  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, module, fake)
        return calls
    return install


@pytest.mark.parametrize(("cls", "module", "expected"), [
    (CometLogger, "comet_ml", ["start", "start.log_parameters", "start.log_metrics", "start.log_image",
                               "start.log_metrics", "start.log_asset", "start.log_image", "start.log_metrics",
                               "start.end"]),
    (ClearMLLogger, "clearml", ["Task.set_offline", "Task.force_store_standalone_script", "Task.init", "Task.init.connect", "Task.init.get_logger",
                                "Task.init.get_logger.report_scalar", "Task.init.get_logger.report_scalar",
                                "Task.init.get_logger.report_image", "Task.init.get_logger.report_scalar",
                                "Task.init.get_logger.report_scalar", "Task.init.upload_artifact",
                                "Task.init.get_logger.report_image", "Task.init.close"]),
    (DVCLiveLogger, "dvclive", ["Live", "Live.log_params", "Live.log_image", "Live.log_metric", "Live.log_metric",
                                "Live.next_step", "Live.log_image", "Live.end"]),
])
def test_each_logger_reports_a_run_through_its_package(cls, module, expected, stand_in, tmp_path, monkeypatch) -> None:
    for key in ("COMET_API_KEY", "CLEARML_API_ACCESS_KEY", "CLEARML_CONFIG_FILE", "COMET_MODE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))           # no ~/clearml.conf: ClearML goes offline
    calls = stand_in(module)
    logger = cls(TrainConfig(data="shapes", **{cls.name: True}))
    for event in _events(tmp_path):
        logger(event)
    assert not logger.disabled
    assert [name for name, _, _ in calls if not name.startswith(("ExperimentConfig", "Task.init.mark"))] == expected
    if cls is CometLogger:   # no API key: an offline experiment in the run folder
        config = next(kw for name, _, kw in calls if name == "ExperimentConfig")
        start = next(kw for name, _, kw in calls if name == "start")
        assert start["online"] is False and config["offline_directory"] == str(tmp_path / "comet")
    if cls is DVCLiveLogger:
        live = next(kw for name, _, kw in calls if name == "Live")
        assert live["dir"] == str(tmp_path / "dvclive") and live["save_dvc_exp"] is False
        assert [a[0] for n, a, _ in calls if n == "Live.log_metric"] == ["metrics/mAP50", "val/box_loss"]
    if cls is ClearMLLogger:
        assert ("Task.set_offline", (), {"offline_mode": True}) in calls


def test_an_online_comet_run_keeps_its_fallback_copy_in_the_run_folder(stand_in, tmp_path, monkeypatch) -> None:
    """comet_ml writes an offline copy when the connection drops; without a folder it would go to
    the working directory (``.cometml-runs``)."""
    monkeypatch.setenv("COMET_API_KEY", "key")
    monkeypatch.delenv("COMET_MODE", raising=False)
    calls = stand_in("comet_ml")
    logger = CometLogger(TrainConfig(data="shapes", comet=True))
    for event in _events(tmp_path):
        logger(event)
    config = next(kw for name, _, kw in calls if name == "ExperimentConfig")
    start = next(kw for name, _, kw in calls if name == "start")
    assert start["online"] is True and config["offline_directory"] == str(tmp_path / "comet")


def test_the_flags_switch_the_loggers_on() -> None:
    assert {"comet", "clearml", "dvclive"} <= set(LOGGERS)
    assert LOGGERS["comet"] is CometLogger and TrainConfig(data="shapes", dvclive=True).dvclive


@pytest.mark.parametrize("cls", [CometLogger, ClearMLLogger, DVCLiveLogger])
def test_a_missing_extra_or_a_failing_call_is_one_warning(cls, tmp_path, monkeypatch, caplog) -> None:
    monkeypatch.setitem(sys.modules, cls.module, None)   # "not installed"
    logger = cls(TrainConfig(data="shapes", **{cls.name: True}))
    with caplog.at_level(logging.WARNING):
        for event in _events(tmp_path):
            logger(event)
    (record,) = caplog.records
    assert f"pip install 'libreyolo-models[{cls.extra}]'" in record.getMessage() and logger.disabled

    broken = types.ModuleType(cls.module)

    def fail(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("service down")
    broken.__getattr__ = lambda name: fail  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, cls.module, broken)
    logger = cls(TrainConfig(data="shapes", **{cls.name: True}))
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        for event in _events(tmp_path):
            logger(event)
    assert len(caplog.records) == 1 and "training goes on" in caplog.records[0].getMessage()


# ------------------------------------------------------------------ real packages, offline
RUN = {"imgsz": 64, "batch": 8, "workers": 0, "epochs": 1, "close_mosaic": 0, "verbose": False, "device": "cpu"}


@pytest.mark.slow  # a real one-epoch run through the package (~15 s)
def test_comet_offline_run_writes_an_experiment_archive(mini_shapes, tmp_path, monkeypatch) -> None:
    pytest.importorskip("comet_ml", reason="the [comet] extra is not installed")
    monkeypatch.delenv("COMET_API_KEY", raising=False)
    monkeypatch.setenv("COMET_MODE", "offline")
    outcome = LibreYOLO("LibreYOLO9t.yaml").train(data=str(mini_shapes), project=str(tmp_path), comet=True, **RUN)
    (archive,) = (outcome.run_dir / "comet").glob("*.zip")
    with zipfile.ZipFile(archive) as z:
        text = b"".join(z.read(n) for n in z.namelist() if n.endswith((".json", ".jsonl")))
    assert b"metrics/mAP50-95" in text and b"val/box_loss" in text


@pytest.mark.slow  # a real one-epoch run through the package (~15 s)
def test_dvclive_run_writes_metrics_params_and_plots_and_leaves_the_repository_alone(mini_shapes, tmp_path,
                                                                                     monkeypatch) -> None:
    pytest.importorskip("dvclive", reason="the [dvclive] extra is not installed")
    import subprocess

    repo = tmp_path / "repo"      # the user's git repository, without DVC, where they train
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "start"], check=True)
    monkeypatch.chdir(repo)
    outcome = LibreYOLO("LibreYOLO9t.yaml").train(data=str(mini_shapes), project="runs", dvclive=True, **RUN)
    assert not (repo / ".dvc").exists() and not (repo / "dvc.yaml").exists()
    assert subprocess.run(["git", "-C", str(repo), "diff", "--cached", "--name-only"], capture_output=True,
                          text=True, check=True).stdout == ""
    folder = repo / outcome.run_dir / "dvclive"
    metrics = json.loads((folder / "metrics.json").read_text())
    assert "metrics" in metrics and "mAP50-95" in metrics["metrics"]
    assert (folder / "params.yaml").is_file() and list((folder / "plots" / "images").rglob("*.jpg"))


@pytest.mark.slow  # a real one-epoch run through the package (~15 s)
def test_clearml_offline_run_writes_a_session(mini_shapes, tmp_path, monkeypatch) -> None:
    pytest.importorskip("clearml", reason="the [clearml] extra is not installed")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CLEARML_OFFLINE_MODE", "1")
    LibreYOLO("LibreYOLO9t.yaml").train(data=str(mini_shapes), project=str(tmp_path / "runs"), clearml=True, **RUN)
    sessions = list((tmp_path / "home" / ".clearml").rglob("offline*"))
    text = b"".join(p.read_bytes() for s in sessions for p in ([s] if s.is_file() else s.rglob("*")) if p.is_file()
                    and p.suffix in (".json", ".jsonl", ".txt", ".zip", ""))
    assert sessions and b"mAP50" in text
