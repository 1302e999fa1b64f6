"""One default-device policy for every job: predict, val, export and train pick their device
through ``devices.default_device`` (a ``device=`` given wins; a model on an accelerator stays
there; else the best device this machine has), and name it in their first log line."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from libreyolo_models import SAMPLE_IMAGE, LibreYOLO, devices


def test_policy_prefers_a_request_then_the_models_accelerator_then_the_best_device(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert devices.best_device() == torch.device("cuda", 0)
    assert devices.default_device(None, torch.device("cpu")) == torch.device("cuda", 0)
    assert devices.default_device(None, torch.device("cuda", 1)) == torch.device("cuda", 1)  # stays put
    assert devices.default_device("cpu", torch.device("cuda", 1)) == torch.device("cpu")
    assert devices.default_device(None, torch.device("cpu"), runs_only_on="cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert devices.default_device(None, torch.device("cpu")) == torch.device("cpu")


def test_predict_val_export_and_train_pick_the_same_default_device(monkeypatch, tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    """Each job without ``device=`` asks the one policy (counted here) and logs '<job> on cpu'."""
    from libreyolo_models.data.shapes import generate_shapes

    generate_shapes(tmp_path / "d", split_sizes={"train": 8, "val": 4})
    data = str(tmp_path / "d" / "data.yaml")
    asked: list[str] = []
    monkeypatch.setattr(devices, "best_device", lambda: asked.append("asked") or torch.device("cpu"))
    model = LibreYOLO("LibreYOLO9t.yaml", nc=5)
    jobs = {
        "predict": lambda: model(SAMPLE_IMAGE, imgsz=64),
        "val": lambda: model.val(data=data, imgsz=64, batch=4, workers=0, verbose=False),
        "export": lambda: model.export(format="torchscript", imgsz=64, file=str(tmp_path / "m.torchscript")),
        "train": lambda: model.train(data=data, epochs=1, imgsz=64, batch=4, nbs=4, workers=0, val=False,
                                     plots=False, verbose=False, project=str(tmp_path / "runs")),
    }
    with caplog.at_level(logging.INFO, logger="libreyolo_models"):
        for job, run in jobs.items():
            before = len(asked)
            caplog.clear()
            run()
            assert len(asked) > before, f"{job} did not go through devices.default_device"
            assert any(r.getMessage() == f"{job} on cpu" for r in caplog.records), f"{job} did not name its device"
