"""``model.benchmark()``: one row per format and precision, measured through the same val code;
a format that fails (here: its converter missing) gets a row with the reason and the run goes on."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from libreyolo_models import ConfigError, LibreYOLO


@pytest.fixture(scope="module")
def shapes8(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from libreyolo_models.data.shapes import generate_shapes

    root = tmp_path_factory.mktemp("shapes8")
    generate_shapes(root, split_sizes={"train": 1, "val": 8})
    return root / "data.yaml"


def test_benchmark_measures_each_format_through_val_and_reports_failures(
        shapes8: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("onnxruntime", reason="the [onnx] extra is not installed")
    monkeypatch.setitem(sys.modules, "pnnx", None)  # as if the [ncnn] extra were missing
    model = LibreYOLO(family="yolo9", size="t", nc=5, imgsz=64)
    result = model.benchmark(data=str(shapes8), formats="pytorch,torchscript,onnx,ncnn", runs=2, warmup=1, batch=8,
                             project=str(tmp_path))
    rows = {row.format: row for row in result.rows}
    assert list(rows) == ["pytorch", "torchscript", "onnx", "ncnn"]
    for fmt in ("pytorch", "torchscript", "onnx"):
        row = rows[fmt]
        assert row.precision == "fp32" and row.size_mib and row.size_mib > 1 and row.latency_ms and row.latency_ms > 0
        assert set(row.metrics) >= {"metrics/mAP50", "metrics/mAP50-95"}
        # Every format validates the same weights through the same task code: the same numbers.
        assert abs(row.metrics["metrics/mAP50-95"] - rows["pytorch"].metrics["metrics/mAP50-95"]) <= 0.005
    assert rows["ncnn"].latency_ms is None and "pip install 'libreyolo[ncnn]'" in rows["ncnn"].note
    table = result.table()
    assert "mAP50-95" in table and "failed:" in table and len(table.splitlines()) == 2 + 4
    assert sorted(p.name for p in (tmp_path / "exp").iterdir()) == ["model_fp32.onnx", "model_fp32.torchscript"]


def test_benchmark_refuses_an_unknown_format_naming_the_known_ones() -> None:
    model = LibreYOLO(family="yolo9", size="t", nc=5, imgsz=64)
    with pytest.raises(ConfigError, match="'onxx' is not a format.*did you mean 'onnx'"):
        model.benchmark(formats="pytorch,onxx")


def test_available_formats_follow_what_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from libreyolo_models.benchmark import available_formats, runner

    monkeypatch.setattr(runner, "_installed", lambda module: module in ("onnx", "onnxruntime", "tensorrt"))
    assert available_formats(torch.device("cpu")) == ["onnx", "torchscript"]  # TensorRT: only on CUDA
    assert available_formats(torch.device("cuda", 0)) == ["onnx", "torchscript", "engine"]
