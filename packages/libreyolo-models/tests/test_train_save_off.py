"""``train(save=False)``: no checkpoint files, and the model object still ends on what ``best.pt``
would have held (the best epoch's EMA weights with its record), handed over in memory."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch

from libreyolo_models import ConfigError, LibreYOLO
from libreyolo_models.certificate import CERTIFICATE_KEY
from libreyolo_models.train.settings import TrainConfig

RUN = {"imgsz": 64, "batch": 2, "workers": 0, "epochs": 3, "plots": False, "verbose": False, "lr0": 0.01}


@pytest.fixture
def first_epoch_is_best(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each validation scores lower than the one before, so the first epoch stays the best and
    the last epoch's weights are not the best ones."""
    from libreyolo_models.tasks.detect.metrics import MetricsResult

    scored: list[Any] = []  # held, so no id is reused

    def falling(self: Any) -> float:
        if not any(r is self for r in scored):
            scored.append(self)
        return -float(next(i for i, r in enumerate(scored) if r is self))

    monkeypatch.setattr(MetricsResult, "fitness", property(falling))


def _train(data: Path, project: Path, **options: Any) -> tuple[LibreYOLO, Any]:
    torch.manual_seed(0)
    model = LibreYOLO("LibreYOLO9t.yaml")
    outcome = model.train(data=str(data), project=str(project), **{**RUN, **options})
    return model, outcome


def _same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k].cpu(), b[k].cpu()) for k in a)


def test_without_files_the_model_ends_on_the_best_epoch_as_best_pt_would_have_it(
        micro_shapes: Path, tmp_path: Path, first_epoch_is_best: None) -> None:
    saved_model, saved = _train(micro_shapes, tmp_path / "saved")
    kept_model, kept = _train(micro_shapes, tmp_path / "kept", save=False)

    assert saved.best is not None and saved.best.is_file()
    assert kept.best is None and kept.last is None and kept.kept is None  # handed over, then dropped
    assert "best not written" in kept.summary()
    assert not list((tmp_path / "kept").rglob("*.pt")) and not (kept.run_dir / "weights").exists()
    assert (kept.run_dir / "results.csv").is_file() and (kept.run_dir / "args.yaml").is_file()
    assert len((kept.run_dir / "results.csv").read_text().splitlines()) == 1 + RUN["epochs"]

    best = torch.load(saved.best, weights_only=True)
    last = torch.load(saved.last, weights_only=True)
    assert best["epoch"] == 0 and last["epoch"] == 2
    assert _same_weights(kept_model.net.state_dict(), best["model"])  # the first epoch's EMA weights...
    assert not _same_weights(kept_model.net.state_dict(), last["model"])  # ...not the last epoch's
    assert _same_weights(kept_model.net.state_dict(), saved_model.net.state_dict())
    record = kept_model._model.checkpoint
    assert record["epoch"] == 0 and record["best_epoch"] == 0 and "optimizer" not in record
    assert record[CERTIFICATE_KEY]["source"] == "train"


def test_without_validation_the_model_ends_on_the_last_epoch(micro_shapes: Path, tmp_path: Path) -> None:
    saved_model, saved = _train(micro_shapes, tmp_path / "saved", val=False, epochs=2)
    kept_model, kept = _train(micro_shapes, tmp_path / "kept", val=False, epochs=2, save=False)
    assert kept.best is None and not list((tmp_path / "kept").rglob("*.pt"))
    best = torch.load(saved.best, weights_only=True)
    assert best["epoch"] == 1 and kept_model._model.checkpoint["epoch"] == 1
    assert _same_weights(kept_model.net.state_dict(), best["model"])
    # The kept model predicts and validates like a loaded one.
    metrics = kept_model.val(data=str(micro_shapes), imgsz=64, batch=2, workers=0, verbose=False)
    again = saved_model.val(data=str(micro_shapes), imgsz=64, batch=2, workers=0, verbose=False)
    assert metrics.map50_95 == again.map50_95


def test_save_period_with_save_off_is_one_line() -> None:
    with pytest.raises(ConfigError, match=r"save_period=5 keeps epoch checkpoints, and save=False writes none"):
        TrainConfig(data="x.yaml", save=False, save_period=5)
    TrainConfig(data="x.yaml", save=False)  # save_period's default is fine


def test_spawned_ranks_refuse_save_off_and_name_torchrun(micro_shapes: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Spawned workers hand their weights back through best.pt only; under torchrun every process
    keeps its own, so that is the way named."""
    import libreyolo_ddp
    from libreyolo_models.train import entry

    real = entry.resolve_plan

    def two_ranks(*args: Any, **kwargs: Any) -> Any:
        plan = real(*args, **kwargs)  # as device="0,1" would plan it, on any machine
        return dataclasses.replace(plan, cfg=dataclasses.replace(plan.cfg, device="0,1"), world_size=2,
                                   devices=libreyolo_ddp.DevicePlan.cpu_workers(2))

    monkeypatch.setattr(entry, "resolve_plan", two_ranks)
    with pytest.raises(ConfigError, match=r"save=False with device='0,1'.*torchrun --nproc_per_node=2 "):
        LibreYOLO("LibreYOLO9t.yaml").train(data=str(micro_shapes), project=str(tmp_path), save=False, **RUN)
    assert not list(tmp_path.rglob("*"))


def test_a_resumed_run_keeps_saving_and_a_kept_model_has_nothing_to_resume(
        micro_shapes: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A resume continues a run's checkpoints: save=False there would leave last.pt behind the
    run, so it is reported and ignored like any other setting a resume keeps. A model that a
    save=False run handed over holds no optimizer state, and its run wrote no last.pt."""
    _, first = _train(micro_shapes, tmp_path, epochs=1, val=False)
    with caplog.at_level("WARNING"):
        again = LibreYOLO(str(first.last)).train(resume=True, epochs=2, save=False)
    assert "resume: save=False differs from the run's True" in caplog.text
    assert again.last is not None and torch.load(again.last, weights_only=True)["epoch"] == 1

    kept_model, kept = _train(micro_shapes, tmp_path, epochs=1, val=False, save=False)
    with pytest.raises(ConfigError, match=r"trained with save=False, which wrote no last.pt: there is nothing to "
                                          r"resume from"):
        kept_model.train(resume=True, epochs=2)
