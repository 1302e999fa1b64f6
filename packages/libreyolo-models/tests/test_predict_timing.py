"""Predict's per-phase clock on the CPU: phases in marking order, a phase marked twice summed
(a batch with JPEGs decoded on the device and video frames converted there marks "decode" twice)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from libreyolo_models.predict import timing


def test_a_phase_marked_twice_sums_its_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    readings = iter([10.0, 10.002, 10.005, 10.011])  # start, then one reading per mark (seconds)
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=lambda: next(readings)))
    clock = timing.PhaseClock(torch.device("cpu"))
    clock.mark("decode")
    clock.mark("preprocess")
    clock.mark("decode")
    phases = clock.ms()
    assert list(phases) == ["decode", "preprocess"]
    assert phases["decode"] == pytest.approx(2.0 + 6.0) and phases["preprocess"] == pytest.approx(3.0)
