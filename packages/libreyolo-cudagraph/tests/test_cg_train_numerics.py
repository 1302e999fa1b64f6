"""N-step training numerics on CPU: the class rule, and whole runs with an emulated graph or a
perturbed arm standing in for the graphed one (the real graphed arm needs a GPU)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from libreyolo_cudagraph import NumericsReport, ParityError, compare_training_runs
from libreyolo_cudagraph.train_numerics import (
    RunTrace,
    classify_runs,
    group_distance,
    trace_hash,
    within_spread,
)


class TinyNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(torch.relu(self.bn(self.conv(x))).mean((2, 3)))


def batches(steps: int = 4):
    gen = torch.Generator().manual_seed(3)
    return [
        ((torch.rand(2, 3, 6, 6, generator=gen),), torch.randint(0, 2, (2,), generator=gen))
        for _ in range(steps)
    ]


def loss_fn(out, target, module):
    return nn.functional.cross_entropy(out, target.to(out.device))  # the target travels as given


def noisy(scale: float):
    """An arm whose forward adds a fixed small perturbation: a stand-in for non-reproducible eager
    (``scale`` and ``-scale`` are two draws of the same size: equally far from the reference)."""

    def wrap(module):
        noise = torch.randn(2, 2, generator=torch.Generator().manual_seed(1)) * scale
        return lambda x: module(x) + noise

    return wrap


def trace(value: float) -> RunTrace:
    t = torch.full((3,), float(value))
    return RunTrace(
        losses=t.clone(), weights={"w": t.clone()}, grads={"w": t.clone()}, buffers={"b": t.clone()}
    )


def test_identical_runs_are_exact_and_a_difference_without_eager_noise_diverges():
    ref = trace(1.0)
    assert classify_runs(ref, trace(1.0), trace(1.0))[0] == "exact"
    assert classify_runs(ref, trace(1.0), trace(1.0 + 1e-6))[0] == "diverges"


def test_a_difference_within_the_eager_spread_is_eager_noise_and_beyond_it_diverges():
    ref = trace(1.0)
    klass, evidence = classify_runs(ref, trace(1.001), trace(1.002))
    assert klass == "eager-noise"
    assert evidence["spread"]["loss"] == pytest.approx(1e-3, rel=1e-3)
    assert classify_runs(ref, trace(1.001), trace(1.1))[0] == "diverges"
    assert classify_runs(ref, trace(1.001), ref)[0] == "eager-noise"  # bit-equal, but eager is noisy


def test_gradients_eager_itself_overflows_differently_do_not_condemn_the_candidate():
    # fp16 autocast: one eager run's last gradients overflow where the other's do not (the grad
    # scaler skips that step in both): the grads spread is NaN, the other groups still judge.
    def run(grad: float, weight: float) -> RunTrace:
        t = torch.full((3,), 1.0)
        return RunTrace(losses=t.clone(), weights={"w": torch.full((3,), weight)},
                        grads={"w": torch.tensor([grad, 1.0, 1.0])}, buffers={"b": t.clone()})

    ref, control = run(math.inf, 1.0), run(2.0, 1.001)
    klass, evidence = classify_runs(ref, control, run(3.0, 1.002))
    assert math.isnan(evidence["spread"]["grads"]) and klass == "eager-noise"
    assert classify_runs(ref, control, run(3.0, 1.1))[0] == "diverges"  # the weights still judge
    assert within_spread(math.nan, math.nan) and not within_spread(math.nan, math.inf)


def test_group_distance_is_relative_and_infinite_for_mismatched_structure():
    ref = {"a": torch.ones(4)}
    assert group_distance({"a": torch.ones(4) * 1.5}, ref) == pytest.approx(0.5)
    assert group_distance({"a": torch.ones(5)}, ref) == math.inf
    assert group_distance({"a": None}, ref) == math.inf
    assert group_distance({"a": None}, {"a": None}) == 0.0


def test_group_distance_reads_equal_infinities_as_equal_and_a_nan_as_unknown():
    masked = torch.tensor([1.0, math.inf, 2.0])  # a buffer holding inf by design (an anchor mask)
    assert group_distance({"a": masked.clone()}, {"a": masked}) == 0.0
    assert group_distance({"a": torch.tensor([1.0, math.inf, 3.0])}, {"a": masked}) == pytest.approx(1 / 5**0.5)
    assert math.isnan(group_distance({"a": torch.tensor([1.0, math.nan, 2.0])}, {"a": masked}))
    overflowed = torch.tensor([math.nan, 3.0, 4.0])  # NaN in the same place in both: no difference
    assert group_distance({"a": overflowed.clone()}, {"a": overflowed}) == 0.0


def test_trace_hash_tells_bitwise_different_runs_apart():
    assert trace_hash(trace(1.0)) == trace_hash(trace(1.0))
    one_ulp_up = torch.nextafter(torch.tensor(1.0), torch.tensor(2.0))
    bumped = RunTrace(
        losses=torch.full((3,), 1.0),
        weights={"w": torch.full((3,), 1.0)},
        grads={"w": torch.full((3,), 1.0)},
        buffers={"b": one_ulp_up.expand(3).clone()},
    )
    assert trace_hash(trace(1.0)) != trace_hash(bumped)


def test_two_eager_runs_and_an_eager_candidate_are_exact_on_cpu():
    report = compare_training_runs(TinyNet, batches(), loss_fn, device="cpu", candidate=lambda m: m)
    assert report.numerics_class == "exact" and report.steps == 4
    assert not report.graphed and "not a GraphedTraining" in report.reason
    assert report.summary().startswith("NOT GRAPHED")


def test_an_emulated_graph_is_exact_and_counts_as_graphed(emulated_training):
    def graphed(module):
        return emulated_training(module, repeat_threshold=1, warmup_iters=1)

    report = compare_training_runs(TinyNet, batches(), loss_fn, device="cpu", candidate=graphed)
    assert report.numerics_class == "exact" and report.graphed and report.reason is None


def test_the_default_candidate_on_cpu_says_it_ran_eager():
    report = compare_training_runs(TinyNet, batches(2), loss_fn, device="cpu")
    assert not report.graphed and report.reason
    assert report.numerics_class == "exact"  # eager fallback: equal, and labelled not graphed


def test_a_perturbed_candidate_diverges_when_eager_reproduces_itself():
    report = compare_training_runs(TinyNet, batches(), loss_fn, device="cpu", candidate=noisy(1e-3))
    assert report.numerics_class == "diverges" and not report.ok
    assert report.spread == {"loss": 0.0, "weights": 0.0, "grads": 0.0, "buffers": 0.0}
    with pytest.raises(ParityError, match="diverges"):
        report.raise_if_failed()


def test_spread_rule_with_a_noisy_control():
    within = compare_training_runs(
        TinyNet, batches(), loss_fn, device="cpu", control=noisy(1e-3), candidate=noisy(-1e-3)
    )
    assert within.numerics_class == "eager-noise", within.summary()
    assert all(v > 0 for v in within.spread.values())
    assert "eager-vs-eager spread: loss" in within.summary()
    beyond = compare_training_runs(
        TinyNet, batches(), loss_fn, device="cpu", control=noisy(1e-6), candidate=noisy(1e-2)
    )
    assert beyond.numerics_class == "diverges"


def test_report_round_trips_through_a_dict():
    report = compare_training_runs(TinyNet, batches(2), loss_fn, device="cpu", candidate=lambda m: m)
    assert NumericsReport.from_dict(report.to_dict()) == report


def test_a_reference_run_that_goes_non_finite_is_refused():
    def exploding(out, target, module):
        return out.sum() * float("inf")

    with pytest.raises(ParityError, match="not finite from step 0"):
        compare_training_runs(TinyNet, batches(2), exploding, device="cpu", candidate=lambda m: m)


@pytest.mark.cuda
@pytest.mark.parametrize("autocast_dtype", [None, torch.float16])
def test_graphed_training_is_exact_over_twenty_steps_on_a_gpu(deterministic_cudnn, autocast_dtype):
    steps = batches(20)
    report = compare_training_runs(TinyNet, steps, loss_fn, device="cuda", autocast_dtype=autocast_dtype)
    assert report.graphed, report.reason
    assert report.numerics_class == "exact", report.summary()
