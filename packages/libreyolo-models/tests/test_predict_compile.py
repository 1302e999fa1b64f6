"""``predict(compile=...)``: modes checked up front, one compile per network and mode, kept until
the network changes, and a failed compile falls back to the eager forward with one warning.

``torch.compile`` is replaced by a recording stand-in here (a real compile takes minutes on a CI
CPU); the GPU test ``test_compile_with_cuda_graph_replays_the_compiled_call_bit_for_bit`` compiles
for real, and ``test_export.py`` holds an exported model's refusal.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
import torch

from libreyolo_models import SAMPLE_IMAGE, LibreYOLO9
from libreyolo_models.compiled import compile_mode
from libreyolo_models.errors import ConfigError
from libreyolo_models.settings import PredictConfig

OPTS = {"imgsz": 64, "conf": 0.0, "max_det": 5}


def test_modes_are_checked_before_any_work() -> None:
    assert compile_mode(False) is None and compile_mode(True) == "default"
    assert compile_mode("max-autotune-no-cudagraphs", cuda_graph=True) == "max-autotune-no-cudagraphs"
    with pytest.raises(ConfigError, match="must be True, False or one of default, reduce-overhead"):
        PredictConfig(compile="fast")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="records CUDA graphs of its own.*use compile=True"):
        PredictConfig(compile="reduce-overhead", cuda_graph=True)
    PredictConfig(compile="reduce-overhead")  # alone it is compile's own business


def test_compile_with_cuda_graph_asks_for_the_torch_whose_dynamo_survives_the_capture_scan(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Before torch 2.6 (no ``torch.compiler.set_stance``) the operator scan before a capture would
    leave the compiled function uncompiled for good: said up front, not found out as slow calls."""
    monkeypatch.delattr(torch.compiler, "set_stance", raising=False)
    with pytest.raises(ConfigError, match="needs torch 2.6 or later.*compile= or cuda_graph= alone"):
        PredictConfig(compile=True, cuda_graph=True)
    PredictConfig(compile=True)  # either alone is fine
    PredictConfig(cuda_graph=True)


class FakeCompile:
    """Stands in for ``torch.compile``: records each call and returns the function, or one that
    raises what a failing backend raises."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[dict[str, Any]] = []
        self.fail = fail

    def __call__(self, fn: Callable[..., Any], **kwargs: Any) -> Callable[..., Any]:
        self.calls.append(kwargs)
        if not self.fail:
            return fn

        def broken(*_: Any) -> Any:
            from torch._dynamo.exc import TorchDynamoException

            raise TorchDynamoException("no C++ compiler found\nmore detail")

        return broken


def test_one_compile_per_network_and_mode_kept_until_the_weights_change(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeCompile()
    monkeypatch.setattr(torch, "compile", fake)
    model = LibreYOLO9(size="t", nc=3)
    plain = model(SAMPLE_IMAGE, **OPTS)[0].boxes.data
    first = model(SAMPLE_IMAGE, compile=True, **OPTS)[0].boxes.data
    again = model(SAMPLE_IMAGE, compile=True, **OPTS)[0].boxes.data
    assert fake.calls == [{"mode": "default", "dynamic": False}]  # compiled once, reused
    assert torch.equal(first, plain) and torch.equal(again, plain)  # the stand-in is the eager forward
    model(SAMPLE_IMAGE, compile="max-autotune-no-cudagraphs", **OPTS)
    model(SAMPLE_IMAGE, compile=True, fuse=False, **OPTS)  # the exact network is another network
    assert [c["mode"] for c in fake.calls] == ["default", "max-autotune-no-cudagraphs", "default"]
    model.fuse()  # folds anew: what was compiled of the old copy goes with it
    model(SAMPLE_IMAGE, compile=True, **OPTS)
    model(SAMPLE_IMAGE, compile=True, fuse=False, **OPTS)  # the exact network's compile stays
    assert len(fake.calls) == 4
    model.release_graphs()
    model(SAMPLE_IMAGE, compile=True, **OPTS)
    assert len(fake.calls) == 5


def test_a_failed_compile_warns_once_and_predicts_eagerly(monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    model = LibreYOLO9(size="t", nc=3)
    plain = model(SAMPLE_IMAGE, **OPTS)[0].boxes.data
    monkeypatch.setattr(torch, "compile", FakeCompile(fail=True))
    with caplog.at_level(logging.WARNING, logger="libreyolo_models.compiled"):
        first = model(SAMPLE_IMAGE, compile=True, **OPTS)[0].boxes.data
        second = model(SAMPLE_IMAGE, compile=True, **OPTS)[0].boxes.data
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "no C++ compiler found" in warnings[0] and "predicting without compile" in warnings[0]
    assert torch.equal(first, plain) and torch.equal(second, plain)


def test_a_wrapped_compile_failure_is_named_by_the_backends_own_error() -> None:
    """Dynamo wraps the backend's error in one whose first line says only "backend raised:"."""
    from libreyolo_models.compiled import compile_failure

    class Wrapped(Exception):
        def __init__(self, inner: Exception) -> None:
            super().__init__("backend='inductor' raised:\n" + str(inner))
            self.inner_exception = inner

    inner = RuntimeError("\nTriton compile timed out after 60 s\nmore detail")
    assert compile_failure(Wrapped(inner)) == "RuntimeError: Triton compile timed out after 60 s (in Wrapped)"
    try:
        raise ValueError("outer") from OSError("disk full")
    except ValueError as err:
        assert compile_failure(err) == "OSError: disk full (in ValueError)"
    assert compile_failure(KeyError("plain")) == "KeyError: 'plain'"
