"""Experiment loggers: one short training run with TensorBoard, MLflow (local file store) and
W&B (offline) all on, each read back from what it wrote; then the failure rules (a missing
extra, a server that is down) on the loggers alone."""

from __future__ import annotations

import logging
import socket
import time
from pathlib import Path

import pytest

from libreyolo_models import LibreYOLO
from libreyolo_models.train.callbacks import EpochEnd, StepEnd, TrainStart
from libreyolo_models.train.loggers import MLflowLogger, TensorBoardLogger
from libreyolo_models.train.settings import TrainConfig

# 24 training images at batch 8: 3 batches per epoch, 6 in all; losses logged every 2 batches.
RUN = {"imgsz": 64, "batch": 8, "workers": 0, "epochs": 2, "close_mosaic": 1, "verbose": False, "log_every": 2,
       "tensorboard": True, "mlflow": True, "wandb": True}


@pytest.fixture(scope="module")
def logged_run(mini_shapes: Path, tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("logged")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", (root / "mlruns").as_uri())
        mp.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("WANDB_DIR", str(root / "wandb-dir"))
        mp.setenv("WANDB_SILENT", "true")
        (root / "wandb-dir").mkdir()
        outcome = LibreYOLO("LibreYOLO9t.yaml").train(data=str(mini_shapes), project=str(root / "runs"), **RUN)
    return root, outcome


def test_tensorboard_event_file_holds_step_losses_epoch_metrics_and_prediction_images(logged_run) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, outcome = logged_run
    assert list(outcome.run_dir.glob("events.out.tfevents.*"))
    events = EventAccumulator(str(outcome.run_dir), size_guidance={"images": 0, "scalars": 0}).Reload()
    tags = events.Tags()
    box = events.Scalars("step/train/box_loss")
    assert [e.step for e in box] == [1, 3, 5]  # batches 2, 4 and 6 (0-based step ids)
    assert all(e.value > 0 for e in box)
    assert [e.step for e in events.Scalars("metrics/mAP50-95")] == [1, 2]
    assert [e.step for e in events.Scalars("train/loss")] == [1, 2]
    images = [t for t in tags["images"] if t.startswith("predictions/")]
    assert len(images) == 4  # the first four validation images
    shots = events.Images(images[0])
    assert [s.step for s in shots] == [1, 2] and shots[0].width == 64 and shots[0].height == 64


def test_mlflow_file_store_holds_params_metric_history_and_plots(logged_run) -> None:
    from mlflow.tracking import MlflowClient

    root, outcome = logged_run
    client = MlflowClient((root / "mlruns").as_uri())
    experiment = client.get_experiment_by_name("runs")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == outcome.run_dir.name and run.info.status == "FINISHED"
    assert run.data.params["epochs"] == "2" and run.data.params["tensorboard"] == "True"
    history = client.get_metric_history(run.info.run_id, "metrics/mAP50-95")
    assert sorted(m.step for m in history) == [1, 2]
    assert [m.step for m in client.get_metric_history(run.info.run_id, "step/train/cls_loss")] == [1, 3, 5]
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"results.csv", "results.png", "confusion_matrix.png", "PR_curve.png"} <= artifacts


def test_wandb_offline_run_dir_holds_history_config_prediction_images_and_plots(logged_run) -> None:
    root, _ = logged_run
    (run_dir,) = (root / "wandb-dir" / "wandb").glob("offline-run-*")
    (records,) = run_dir.glob("run-*.wandb")
    data = records.read_bytes()  # protobuf records: keys are stored as plain UTF-8
    assert data.count(b"step/train/box_loss") >= 3  # three step rows (every 2 of 6 batches)
    assert b"metrics/mAP50-95" in data and b"log_every" in data
    media = run_dir / "files" / "media" / "images"
    predictions = sorted(p.name for p in (media / "predictions").iterdir())
    assert len(predictions) == 8  # four validation images, two epochs
    assert {p.name.split("_")[0] for p in (media / "plots").iterdir()} >= {"confusion", "results", "labels"}


def _start(tmp_path: Path) -> TrainStart:
    return TrainStart(tmp_path, epochs=1, start_epoch=0, config={"epochs": 1})


def test_a_missing_extra_is_one_warning_naming_it_and_then_silence(tmp_path, monkeypatch, caplog) -> None:
    monkeypatch.setattr(TensorBoardLogger, "module", "libreyolo_test_no_such_tensorboard")
    logger = TensorBoardLogger(TrainConfig(data="shapes", tensorboard=True))
    with caplog.at_level(logging.WARNING):
        logger(_start(tmp_path))
        logger(StepEnd(0, 0, {"train/box_loss": 1.0}, {"lr/pg0": 0.01}))
        logger(EpochEnd(0, {"metrics/mAP50": 0.1}, True, tmp_path))
    (record,) = caplog.records
    assert "tensorboard=True" in record.getMessage()
    assert "pip install 'libreyolo-models[tensorboard]'" in record.getMessage()
    assert logger.disabled and not list(tmp_path.iterdir())


def test_an_unreachable_mlflow_server_is_one_warning_not_a_crash_or_a_long_wait(tmp_path, monkeypatch,
                                                                                caplog) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{port}")
    logger = MLflowLogger(TrainConfig(data="shapes", mlflow=True))
    started = time.perf_counter()
    with caplog.at_level(logging.WARNING):
        logger(_start(tmp_path))
        logger(EpochEnd(0, {"metrics/mAP50": 0.1}, True, tmp_path))
    assert time.perf_counter() - started < 60  # mostly importing mlflow; the probe itself is 2 s at most
    (record,) = [r for r in caplog.records if "mlflow" in r.getMessage()]
    assert "not reachable" in record.getMessage() and f"127.0.0.1:{port}" in record.getMessage()
    assert "training goes on" in record.getMessage() and logger.disabled


@pytest.mark.parametrize(("rank", "expected"), [(0, ["TensorBoardLogger", "MLflowLogger", "WandbLogger"]), (1, [])])
def test_only_rank_zero_builds_loggers(rank, expected, monkeypatch) -> None:
    import libreyolo_ddp
    from libreyolo_models.train.plan import resolve_plan
    from libreyolo_models.train.trainer import Trainer

    model = LibreYOLO("LibreYOLO9t.yaml").handle  # jobs take the handle, not the facade
    plan = resolve_plan(model, {"data": "shapes", "device": "cpu", "tensorboard": True, "mlflow": True,
                                "wandb": True}, "test")
    monkeypatch.setattr(libreyolo_ddp, "dist_env", lambda: libreyolo_ddp.DistEnv(rank=rank, world_size=2))
    trainer = Trainer(model, plan, callbacks=[print])
    assert [type(cb).__name__ for cb in trainer.callbacks.callbacks[1:]] == expected
    assert trainer.callbacks.enabled is (rank == 0)
