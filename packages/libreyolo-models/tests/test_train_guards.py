"""Training never goes silently wrong: every numeric hyperparameter is checked once, optimizer=auto
keeps the learning rate the user set, a NaN/inf loss skips its step and then stops the run, and a
non-finite state is never saved (nor loaded without a warning)."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from libreyolo_models import ConfigError, LibreYOLO
from libreyolo_models.contract.family import LossResult
from libreyolo_models.errors import TrainingDivergedError
from libreyolo_models.train.divergence import NONFINITE_STEP_LIMIT, NonFiniteSteps
from libreyolo_models.train.optim import OptimizerChoice, build_optimizer, choose_optimizer
from libreyolo_models.train.settings import TrainConfig
from libreyolo_models.train.step import _step_unless

TINY = {"imgsz": 64, "batch": 2, "workers": 0, "epochs": 1, "plots": False, "verbose": False}


# ----------------------------------------------------------------------------- hyperparameters

@pytest.mark.parametrize(("key", "value", "match"), [
    ("lr0", float("nan"), r"lr0=nan must be a finite number \(the initial learning rate"),
    ("lr0", -1.0, r"lr0=-1.0 is outside \(0, 1\]"),
    ("lr0", float("inf"), r"lr0=inf must be a finite number"),
    ("lr0", 1e8, r"lr0=100000000.0 is outside \(0, 1\]"),
    ("lr0", 0.0, r"lr0=0.0 is outside \(0, 1\]"),
    ("momentum", 1.5, r"momentum=1.5 is outside \[0, 1\)"),
    ("momentum", float("nan"), r"momentum=nan must be a finite number"),
    ("lrf", -0.1, r"lrf=-0.1 is outside \[0, 1\]"),
    ("weight_decay", float("nan"), "weight_decay=nan"),
    ("warmup_epochs", -1.0, r"warmup_epochs=-1.0 must be >= 0"),
    ("warmup_momentum", 1.0, r"warmup_momentum=1.0 is outside \[0, 1\)"),
    ("warmup_bias_lr", float("inf"), "warmup_bias_lr=inf must be a finite number"),
    ("box", float("nan"), "box=nan must be a finite number"),
    ("max_grad_norm", float("inf"), "max_grad_norm=inf must be a finite number"),
    ("val_conf", 5.0, r"val_conf=5.0 is outside \[0, 1\]"),
    ("val_iou", float("nan"), "val_iou=nan"),
    ("patience", -1, "patience=-1 must be at least 0"),
])
def test_each_bad_hyperparameter_is_one_line_naming_the_value(key: str, value: object, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as err:
        TrainConfig(data="shapes", **{key: value})
    assert "\n" not in str(err.value)


def test_a_nan_gain_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"gains\[obj\]=nan must be a finite number"):
        TrainConfig(data="shapes", gains={"obj": float("nan")})


def test_command_line_strings_like_nan_are_checked_too() -> None:
    from libreyolo_models.config import load_config

    with pytest.raises(ConfigError, match="lr0=nan"):
        load_config(TrainConfig, {"data": "shapes", "lr0": "nan"}, "command line")


# ----------------------------------------------------------------------------- optimizer=auto

def test_optimizer_auto_keeps_an_explicit_lr0_and_momentum_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    cfg = TrainConfig(data="shapes", lr0=0.0001, momentum=0.5)
    with caplog.at_level(logging.INFO):
        choice = choose_optimizer(cfg, iterations=100, explicit=frozenset({"lr0", "momentum", "data"}))
    assert choice == OptimizerChoice("AdamW", 0.0001, 0.5)
    assert "with your lr0=0.0001, momentum=0.5 (its own: lr0=0.002, momentum=0.9)" in caplog.text


def test_optimizer_auto_without_explicit_values_uses_its_own_and_says_how_to_set_them(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        choice = choose_optimizer(TrainConfig(data="shapes"), iterations=100)
    assert choice == OptimizerChoice("AdamW", 0.002, 0.9)
    assert "lr0= and momentum= set your own" in caplog.text
    assert choose_optimizer(TrainConfig(data="shapes"), iterations=20_000) == OptimizerChoice("SGD", 0.01, 0.937)


def test_sgd_with_zero_momentum_is_plain_sgd_not_a_nesterov_error() -> None:
    net = nn.Linear(2, 2)
    opt = build_optimizer([{"params": list(net.parameters()), "weight_decay": 0.0}],
                          TrainConfig(data="shapes", optimizer="SGD", momentum=0.0), iterations=10)
    assert opt.param_groups[0]["nesterov"] is False


def test_a_resumed_run_keeps_its_optimizer_choice_whatever_its_new_length(micro_shapes: Path, tmp_path: Path,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    outcome = LibreYOLO("LibreYOLO9t.yaml").train(data=str(micro_shapes), project=str(tmp_path), lr0=0.0005,
                                                  val=False, **TINY)
    ckpt = torch.load(outcome.last, weights_only=True)
    assert ckpt["optimizer_choice"] == {"optimizer": "AdamW", "lr0": 0.0005, "momentum": 0.9}
    with caplog.at_level(logging.INFO):
        LibreYOLO(outcome.last).train(resume=True, epochs=2)
    assert "optimizer=auto chose" not in caplog.text  # restored, not chosen again
    assert torch.load(outcome.last, weights_only=True)["optimizer_choice"]["lr0"] == 0.0005


# ----------------------------------------------------------------------------- non-finite steps

def test_a_nan_loss_skips_its_step_and_leaves_the_weights_as_they_were() -> None:
    net = nn.Linear(3, 1)
    opt = build_optimizer([{"params": list(net.parameters()), "weight_decay": 0.0}],
                          TrainConfig(data="shapes", optimizer="SGD", lr0=0.1), iterations=10)
    before = [p.detach().clone() for p in net.parameters()]
    steps = NonFiniteSteps(torch.device("cpu"))
    loss = net(torch.ones(2, 3)).sum() * float("nan")
    steps.see_loss(loss)
    loss.backward()
    _step_unless(opt, steps.pending.clone())
    steps.end_step(steps.pending.clone())
    assert all(torch.equal(a, b) for a, b in zip(before, net.parameters()))
    assert steps._counts.tolist() == [1, 1, 1]
    opt.zero_grad()
    good = net(torch.ones(2, 3)).sum()
    steps.see_loss(good)
    good.backward()
    _step_unless(opt, steps.pending.clone())
    steps.end_step(steps.pending.clone())
    assert not torch.equal(before[0], net.weight) and steps._counts.tolist() == [1, 0, 1]


def _nan_loss(monkeypatch: pytest.MonkeyPatch, model: LibreYOLO) -> None:
    family_class = type(model.family)
    real = family_class.compute_loss

    def poisoned(self, outputs, targets, ctx):  # type: ignore[no-untyped-def]
        result = real(self, outputs, targets, ctx)
        return LossResult(result.total * float("nan"), result.items * float("nan"))

    monkeypatch.setattr(family_class, "compute_loss", poisoned)


def test_a_loss_that_stays_nan_stops_the_run_with_one_line_and_saves_only_finite_weights(
        micro_shapes: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert NONFINITE_STEP_LIMIT == 10  # the documented bound; 3 here keeps the run short
    monkeypatch.setattr("libreyolo_models.train.divergence.NONFINITE_STEP_LIMIT", 3)
    model = LibreYOLO("LibreYOLO9t.yaml")
    _nan_loss(monkeypatch, model)
    with pytest.raises(TrainingDivergedError, match="NaN or inf for 3 optimizer steps in a row") as err:
        model.train(data=str(micro_shapes), project=str(tmp_path), lr0=0.001, val=False, **{**TINY, "epochs": 3})
    assert "\n" not in str(err.value) and "lower lr0" in str(err.value)
    from libreyolo_models.checkpoint import nonfinite_entries

    saved = list(tmp_path.rglob("*.pt"))  # the first epoch's: its steps were skipped, its weights finite
    assert saved and all(not nonfinite_entries(torch.load(p, weights_only=True)["model"]) for p in saved)


def test_non_finite_weights_are_never_saved_as_best(micro_shapes: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from libreyolo_models.train import step as step_module

    real = step_module.TrainStep.optimizer_step

    def poison_a_buffer(self):  # type: ignore[no-untyped-def]
        real(self)
        bn = next(m for m in self.net.modules() if isinstance(m, nn.BatchNorm2d))
        bn.running_mean.fill_(float("nan"))

    monkeypatch.setattr(step_module.TrainStep, "optimizer_step", poison_a_buffer)
    with pytest.raises(TrainingDivergedError, match="weight tensors hold NaN or inf .*nothing of this epoch was saved"):
        LibreYOLO("LibreYOLO9t.yaml").train(data=str(micro_shapes), project=str(tmp_path), **TINY)
    assert not list(tmp_path.rglob("*.pt"))


def test_the_cli_ends_a_diverged_run_with_exit_1_and_one_line(micro_shapes: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from libreyolo_cli.main import main

    monkeypatch.setattr("libreyolo_models.train.divergence.NONFINITE_STEP_LIMIT", 1)
    _nan_loss(monkeypatch, LibreYOLO("LibreYOLO9t.yaml"))
    code = main(["train", "model=LibreYOLO9t.yaml", f"data={micro_shapes}", "epochs=1", "imgsz=64", "batch=2",
                 "workers=0", "device=cpu", "plots=false", "verbose=false", f"project={tmp_path}"])
    err = capsys.readouterr().err
    assert code == 1 and "TrainingDivergedError: training stopped" in err and "Traceback" not in err


def test_loading_a_checkpoint_with_nan_weights_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    model = LibreYOLO("LibreYOLO9t.yaml")
    with torch.no_grad():
        next(model.net.parameters()).fill_(float("nan"))
    path = model.save(tmp_path / "nan.pt")
    with caplog.at_level(logging.WARNING):
        LibreYOLO(path)
    assert "hold NaN or inf" in caplog.text and str(path) in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        LibreYOLO(LibreYOLO("LibreYOLO9t.yaml").save(tmp_path / "fine.pt"))
    assert "NaN" not in caplog.text


def test_nan_is_no_threshold_of_val(micro_shapes: Path) -> None:
    model = LibreYOLO("LibreYOLO9t.yaml")
    with pytest.raises(ConfigError, match=r"conf=5.0 is outside \[0, 1\]"):
        model.val(data=str(micro_shapes), conf=5)
    with pytest.raises(ConfigError, match="iou=nan must be a finite number"):
        model.val(data=str(micro_shapes), iou=math.nan)
