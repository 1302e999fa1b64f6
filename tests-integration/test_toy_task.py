"""The task contract holds: a task defined in this folder (``toy_task/``: counting objects), with a
family implementing it, joined through the public ``register_task`` and ``register_family``,
trains, validates, predicts and exports through the facade and the CLI, with its own metrics and
``Results`` content, and no file of the zoo changed."""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from libreyolo_models import (
    SAMPLE_IMAGE,
    LibreYOLO,
    register_family,
    register_task,
    unregister_family,
    unregister_task,
)

sys.path.insert(0, str(Path(__file__).parent))
from toy_task import SPEC, CountTask  # noqa: E402

FAST = {"epochs": 2, "imgsz": 64, "batch": 8, "workers": 0, "device": "cpu", "verbose": False, "plots": False}


@pytest.fixture
def counting() -> Iterator[None]:
    register_task(CountTask())
    register_family(SPEC)
    try:
        yield
    finally:
        unregister_family(SPEC.name)
        unregister_task("count")


def test_a_registered_task_trains_validates_predicts_and_exports(counting, mini_shapes: Path, tmp_path: Path) -> None:
    model = LibreYOLO("LibreToyCountn.yaml")
    assert model.task == "count" and model.task_spec.name == "count"
    outcome = model.train(data=str(mini_shapes), project=str(tmp_path), name="count", **FAST)
    with (outcome.run_dir / "results.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 and {"train/mse_loss", "metrics/mae"} <= set(rows[0])
    metrics = model.val(data=str(mini_shapes), imgsz=64, workers=0, verbose=False)
    assert metrics.n_images == 8 and metrics.mae >= 0 and model.metrics is metrics
    result = model(SAMPLE_IMAGE, imgsz=64)[0]
    assert result.count.value >= 0 and result.boxes is None and result.summary().endswith("objects")
    assert result.to_csv().splitlines()[0] == "count" and len(result) == 1
    onnx = model.export(format="onnx", file=str(tmp_path / "count.onnx"))
    exported = LibreYOLO(onnx)
    assert exported.task == "count"
    assert exported(SAMPLE_IMAGE, imgsz=64)[0].count.value == pytest.approx(result.count.value, abs=1e-4)
    again = LibreYOLO(outcome.best)
    assert (again.task, again(SAMPLE_IMAGE, imgsz=64)[0].count.value) == ("count", result.count.value)


def test_a_registered_task_through_the_cli(counting, mini_shapes: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture) -> None:
    from libreyolo_cli.main import main

    code = main(["train", "model=LibreToyCountn.yaml", f"data={mini_shapes}", "epochs=1", "imgsz=64", "batch=8",
                 "workers=0", "device=cpu", f"project={tmp_path}", "name=cli", "--no-verbose", "--no-plots"])
    assert code == 0, capsys.readouterr().err
    best = tmp_path / "cli" / "weights" / "best.pt"
    assert main(["val", f"model={best}", f"data={mini_shapes}", "imgsz=64", "workers=0", "--no-verbose"]) == 0
    assert main(["predict", f"model={best}", "imgsz=64"]) == 0
    assert main(["export", f"model={best}", "format=onnx", f"file={tmp_path / 'c.onnx'}"]) == 0
    out = capsys.readouterr().out
    assert "MAE" in out and "objects" in out


def test_task_names_are_owned_once(counting) -> None:
    from libreyolo_models import ConfigError

    with pytest.raises(ConfigError, match="a task named 'count' is already registered"):
        register_task(CountTask())
    with pytest.raises(ConfigError, match="built-in task"):
        unregister_task("detect")
