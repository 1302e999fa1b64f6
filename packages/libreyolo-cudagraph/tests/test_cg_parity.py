"""Parity verifier on CPU: comparisons, output paths, and detection of wrong or stale graphs."""

from __future__ import annotations

from collections import namedtuple

import pytest
import torch
from torch import nn

from libreyolo_cudagraph import (
    ParityError,
    ParityReport,
    bitwise_equal,
    contrasting_probes,
    max_abs_diff,
    max_ulp_distance,
    verify_parity,
)
from libreyolo_cudagraph.infer_graph import CapturedForward
from libreyolo_cudagraph.parity import verify_with
from libreyolo_cudagraph.tree import flatten, leaf_paths, unflatten

Pair = namedtuple("Pair", "left right")


def test_bitwise_equality_tells_signed_zeros_apart_and_matches_identical_nans():
    assert not bitwise_equal(torch.tensor([0.0]), torch.tensor([-0.0]))
    nan = torch.tensor([float("nan")])
    assert bitwise_equal(nan, nan.clone())
    assert not bitwise_equal(torch.ones(2), torch.ones(2, dtype=torch.float64))
    assert not bitwise_equal(torch.ones(2), torch.ones(3))
    assert bitwise_equal(torch.arange(4), torch.arange(4))


def test_ulp_distance_counts_representable_steps_across_zero():
    one = torch.tensor([1.0])
    assert max_ulp_distance(one, torch.nextafter(one, torch.tensor([2.0]))) == 1
    tiny = torch.nextafter(torch.tensor([0.0]), torch.tensor([1.0]))
    assert max_ulp_distance(tiny, -tiny) == 2
    half = torch.tensor([1.0], dtype=torch.float16)
    assert max_ulp_distance(half, torch.nextafter(half, half * 2)) == 1
    assert max_ulp_distance(torch.arange(3), torch.arange(3)) is None


def test_max_abs_diff_ignores_matching_nans_and_infs():
    a = torch.tensor([float("nan"), float("inf"), 1.0])
    assert max_abs_diff(a, a.clone()) == 0.0
    assert max_abs_diff(a, torch.tensor([float("nan"), float("inf"), 1.5])) == 0.5


def test_tree_round_trip_keeps_containers_constants_and_names_paths():
    x, y = torch.rand(2), torch.rand(3)
    nested = {"boxes": (x, None), "pair": Pair(y, [x, 7])}
    leaves, spec = flatten(nested)
    assert len(leaves) == 3
    rebuilt = unflatten(spec, leaves)
    assert isinstance(rebuilt["pair"], Pair) and rebuilt["pair"].right[1] == 7 and rebuilt["boxes"][1] is None
    assert leaf_paths(spec) == ["out['boxes'][0]", "out['pair'][0]", "out['pair'][1][0]"]
    assert leaf_paths(flatten(x)[1]) == ["out"]


def test_contrasting_probes_are_reproducible_and_from_different_distributions():
    (a,), (b,) = contrasting_probes((2, 3, 8, 8), device="cpu")
    (a2,), _ = contrasting_probes((2, 3, 8, 8), device="cpu")
    assert torch.equal(a, a2)
    assert a.min() >= 0 and a.max() < 1
    assert b.min() < 0 and b.max() > 1
    (h,), _ = contrasting_probes((4,), dtype=torch.float16, device="cpu")
    assert h.dtype == torch.float16


def test_cpu_module_is_reported_not_graphed_with_the_reason():
    net = nn.Conv2d(3, 2, 3).eval()
    report = verify_parity(net, *contrasting_probes((1, 3, 8, 8), device="cpu"))
    assert not report.graphed and not report.ok
    assert "cpu" in report.reason
    with pytest.raises(ParityError, match="not graphed"):
        report.raise_if_failed()


def make_runner(emulated_runner, fn, **kwargs):
    return emulated_runner(fn, mode="on", max_graphs=1, **kwargs)


def test_faithful_graph_passes_with_every_output_named(emulated_runner):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).eval()

    def fn(x):
        y = net(x)
        return {"map": y, "stats": (y.mean(), torch.zeros(2))}

    report = verify_with(
        make_runner(emulated_runner, fn, watch=net), *contrasting_probes((2, 3, 8, 8), device="cpu"), atol=0.0
    )
    assert report.ok, report.summary()
    assert [leaf.path for leaf in report.leaves] == ["out['map']", "out['stats'][0]", "out['stats'][1]"]
    assert [leaf.probes_differ for leaf in report.leaves] == [True, True, False]
    assert ": PASS: 3 output(s) bit-identical" in report.summary()


def test_train_mode_module_is_compared_from_identical_state(emulated_runner):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).train().requires_grad_(False)
    report = verify_with(
        make_runner(emulated_runner, net), *contrasting_probes((2, 3, 8, 8), device="cpu"), atol=0.0
    )
    assert report.ok, report.summary()
    assert net[1].num_batches_tracked.item() == 0


def test_graph_that_ignores_new_inputs_fails_on_probe_b(emulated_runner):
    net = nn.Conv2d(3, 2, 3).eval()

    class Frozen(emulated_runner):
        def _capture(self, inputs):
            captured = super()._capture(inputs)
            captured.static_inputs = [x.clone() for x in captured.static_inputs]  # copies land elsewhere
            return captured

    report = verify_with(Frozen(net, max_graphs=1), *contrasting_probes((1, 3, 8, 8), device="cpu"), atol=0.0)
    assert not report.ok
    (leaf,) = report.leaves
    assert leaf.replay_a_equal and not leaf.replay_b_equal and not leaf.stale
    assert "replay(B) != eager(B)" in report.summary()


def test_graph_that_returns_the_previous_result_is_flagged_stale(emulated_runner):
    def fn(x):
        return x * 3

    class OneBehind(emulated_runner):
        def _capture(self, inputs):
            static = [x.clone() for x in inputs]
            previous = [x.clone() for x in inputs]
            out = [fn(*static)]

            def replay():
                out[0].copy_(fn(*previous))  # computes from the previous call's input
                previous[0].copy_(static[0])

            return CapturedForward(static, out, flatten(out[0])[1], replay)

    report = verify_with(OneBehind(fn, max_graphs=1), *contrasting_probes((4, 4), device="cpu"), atol=0.0)
    (leaf,) = report.leaves
    assert leaf.stale and not report.ok
    assert "stale graph" in report.summary()


def test_constant_output_proves_nothing_and_fails(emulated_runner):
    report = verify_with(
        make_runner(emulated_runner, lambda x: torch.zeros(3)),
        *contrasting_probes((3,), device="cpu"),
        atol=0.0,
    )
    assert report.graphed and not report.ok
    assert "proves nothing" in report.summary()


def test_tolerance_accepts_small_differences_only(emulated_runner):
    class Noisy(emulated_runner):
        def _capture(self, inputs):
            captured = super()._capture(inputs)
            inner = captured.replay

            def replay():
                inner()
                captured.static_leaves[0].add_(1e-6)

            captured.replay = replay
            return captured

    probes = contrasting_probes((8,), dtype=torch.float64, device="cpu")
    assert not verify_with(Noisy(lambda x: x * 2, max_graphs=1), *probes, atol=0.0).ok
    assert verify_with(Noisy(lambda x: x * 2, max_graphs=1), *probes, atol=1e-5).ok


def test_report_round_trips_through_its_dict_form(emulated_runner):
    report = verify_with(
        make_runner(emulated_runner, lambda x: (x + 1, x * 2)),
        *contrasting_probes((2, 2), device="cpu"),
        atol=0.0,
    )
    again = ParityReport.from_dict(report.to_dict())
    assert again == report and again.ok
