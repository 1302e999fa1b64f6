"""Predict's device: the first log line names it; with none given, a GPU is used when there is one."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from libreyolo_models import LibreYOLO9

IMGSZ = 64


@pytest.fixture(scope="module")
def model() -> LibreYOLO9:
    return LibreYOLO9(size="t", nc=3, imgsz=IMGSZ, device="cpu")


def test_predict_logs_its_device_first_and_cpu_stays_cpu(model, caplog) -> None:
    with caplog.at_level(logging.INFO, logger="libreyolo_models"):
        model(np.zeros((32, 32, 3), np.uint8), device="cpu")
    assert caplog.records[0].getMessage() == "predict on cpu"
    assert model.device.type == "cpu"


@pytest.mark.cuda
def test_predict_without_device_runs_on_the_first_gpu(caplog) -> None:
    m = LibreYOLO9(size="t", nc=3, imgsz=IMGSZ)
    assert m.device.type == "cpu"
    with caplog.at_level(logging.INFO, logger="libreyolo_models"):
        m(np.zeros((32, 32, 3), np.uint8))
    assert m.device == torch.device("cuda", 0)
    assert caplog.records[0].getMessage().startswith("predict on cuda:0 (")
    m(np.zeros((32, 32, 3), np.uint8), device="cpu")
    assert m.device.type == "cpu"


@pytest.mark.cuda
def test_val_without_device_runs_on_the_first_gpu(caplog) -> None:
    m = LibreYOLO9(size="t", nc=5, imgsz=IMGSZ)
    with caplog.at_level(logging.INFO, logger="libreyolo_models"):
        metrics = m.val(data="shapes", imgsz=IMGSZ, workers=0, verbose=False)
    assert m.device == torch.device("cuda", 0) and metrics.n_images > 0
    assert caplog.records[0].getMessage().startswith("val on cuda:0 (")
