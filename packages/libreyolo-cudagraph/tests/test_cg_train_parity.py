"""Training parity tool on CPU: tensor classification and the report (the graphed arm needs a GPU)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from libreyolo_cudagraph import ParityError, TensorVerdict, TrainParityReport, compare_train_step
from libreyolo_cudagraph.train_parity import classify


def test_bitwise_equal_tensor_is_exact():
    t = torch.rand(5)
    assert classify(t.clone(), t, t.clone(), t.clone())[0] == "exact"


def test_one_or_two_ulp_apart_is_last_bit():
    t = torch.rand(5) + 1
    bumped = torch.nextafter(torch.nextafter(t, t * 2), t * 2)
    verdict, diff, ulp, _ = classify(bumped, t, t.clone(), t.clone())
    assert verdict == "last-bit" and ulp == 2 and diff > 0


def test_difference_within_eager_self_noise_is_eager_noise():
    t = torch.ones(5)
    control = t + 1e-3  # eager does not reproduce itself
    assert classify(t + 3e-3, t, control, t.clone())[0] == "eager-noise"
    assert classify(t + 1e-1, t, control, t.clone())[0] == "mismatch"


def test_difference_in_a_tensor_that_depends_on_the_rng_is_own_rng():
    t = torch.ones(5)
    assert classify(t + 1, t, t.clone(), t * 2)[0] == "own-rng"
    assert classify(t + 1, t, t.clone(), t.clone())[0] == "mismatch"


def test_missing_gradients_match_only_when_both_are_missing():
    assert classify(None, None, None, None)[0] == "exact"
    assert classify(None, torch.ones(1), None, None)[0] == "mismatch"


def test_summary_counts_each_family_and_lists_mismatches():
    report = TrainParityReport(
        verdicts=(
            TensorVerdict("loss", "loss", "exact", 0.0, 0, 0.0),
            TensorVerdict("grad", "a.weight", "exact", 0.0, 0, 0.0),
            TensorVerdict("grad", "a.bias", "last-bit", 1e-7, 1, 0.0),
            TensorVerdict("grad", "b.weight", "mismatch", 0.5, 99, 0.0),
            TensorVerdict("buffer", "bn.running_mean", "exact", 0.0, 0, 0.0),
        ),
        graphed=True,
    )
    text = report.summary()
    assert text.startswith(
        "loss exact; 1/3 gradients bit-identical, 1 last-bit, 0 eager-noise, 0 own-rng, 1 mismatch"
    )
    assert "1/1 buffers bit-identical" in text and "grad b.weight" in text
    assert not report.ok
    with pytest.raises(ParityError, match="b.weight"):
        report.raise_if_failed()


def test_compare_train_step_on_cpu_reports_that_nothing_was_graphed():
    def make_model():
        return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.LazyLinear(2))

    def make_inputs():
        return (torch.rand(2, 3, 6, 6),)

    def loss_fn(out, inputs):
        return out.square().mean()

    report = compare_train_step(make_model, make_inputs, loss_fn, device="cpu")
    assert not report.graphed and not report.ok
    assert "cpu" in report.reason
    counts = report.counts("grad")
    assert counts["exact"] == 6 and sum(counts.values()) == 6
    assert report.counts("buffer")["exact"] == 3
    assert report.summary().startswith("NOT GRAPHED")
