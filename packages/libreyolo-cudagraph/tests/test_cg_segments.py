"""SegmentedGraphRunner on CPU: segments run in order, graphed ones through their own runners
(captures emulated, see conftest.py), eager ones directly; the whole equals all-eager; mode,
info, invalidation and release reach every graphed segment; bad segments are refused."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from libreyolo_cudagraph import GraphConfigError, Segment, SegmentedGraphRunner


class Deformed(nn.Module):
    """conv -> offsets (graphable) | offset sampling (eager, standing in for a deformable
    convolution; torch only) | conv (graphable), twice: four seams."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.pre = nn.ModuleList([nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1)])
        self.offsets = nn.ModuleList([nn.Conv2d(4, 2, 3, padding=1), nn.Conv2d(4, 2, 3, padding=1)])
        self.weights = nn.ParameterList([nn.Parameter(torch.randn(4, 4, 3, 3) * 0.2) for _ in range(2)])
        self.post = nn.Conv2d(4, 2, 1)
        self.eval().requires_grad_(False)

    def head(self, x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.pre[k](x).relu()
        return h, self.offsets[k](h)

    def deform(self, h: torch.Tensor, offset: torch.Tensor, k: int) -> torch.Tensor:
        grid = offset.permute(0, 2, 3, 1).tanh()
        return F.conv2d(F.grid_sample(h, grid, align_corners=False), self.weights[k], padding=1)

    def segments(self) -> list[Segment]:
        return [Segment(lambda x: self.head(x, 0), True, "head0"),
                Segment(lambda h, o: self.deform(h, o, 0), False, "deform0"),
                Segment(lambda x: self.head(x, 1), True, "head1"),
                Segment(lambda h, o: self.deform(h, o, 1), False, "deform1"),
                Segment(self.post, True, "post")]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, o = self.head(x, 0)
        h, o = self.head(self.deform(h, o, 0), 1)
        return self.post(self.deform(h, o, 1))


def test_segments_equal_eager_with_each_graphed_segment_replayed(emulated_runner):
    net = Deformed()
    runner = SegmentedGraphRunner(net.segments(), make_runner=emulated_runner, watch=net, name="net")
    assert repr(runner) == "SegmentedGraphRunner('net', mode='on', segments='GeGeG')"
    for _ in range(3):
        x = torch.rand(2, 3, 8, 8)
        assert torch.equal(runner(x), net(x))
    assert [r.captures for r in runner.graphed_runners] == [1, 1, 1]
    info = runner.info()
    assert info.replays == 9 and len(info.graphs) == 3
    assert info.eager_calls == 6  # the two deformable segments, three calls each
    assert [i.name for i in runner.segment_infos()] == ["net[0:head0]", "net[2:head1]", "net[4:post]"]


def test_a_single_tensor_is_one_argument_and_tuples_are_spread():
    seen = []
    runner = SegmentedGraphRunner([Segment(lambda x: (x, x + 1), False), Segment(lambda a, b: a * b, False),
                                   Segment(lambda y: seen.append(y.shape) or y, False)])
    assert torch.equal(runner(torch.full((2,), 2.0)), torch.full((2,), 6.0))
    assert seen == [torch.Size([2])]


def test_mode_invalidate_and_release_reach_every_graphed_segment(emulated_runner):
    net = Deformed()
    runner = SegmentedGraphRunner(net.segments(), make_runner=emulated_runner, watch=net, mode="auto")
    assert all(r.mode == "auto" for r in runner.graphed_runners)
    runner.mode = "on"
    assert all(r.mode == "on" for r in runner.graphed_runners) and runner.watch is net
    x = torch.rand(1, 3, 8, 8)
    runner(x)
    runner.invalidate("weights changed")
    assert runner.info().graphs == () and runner.info().last_invalidation == "weights changed"
    runner(x)
    runner.release()
    assert runner.info().graphs == ()
    assert torch.equal(runner(x), net(x))


def test_capture_captures_every_graphed_segment_ahead(emulated_runner):
    net = Deformed()
    runner = SegmentedGraphRunner(net.segments(), make_runner=emulated_runner, watch=net, mode="off")
    runner.capture(torch.rand(1, 3, 8, 8))
    assert [len(i.graphs) for i in runner.segment_infos()] == [1, 1, 1]


def test_cpu_inputs_run_every_segment_eagerly_with_the_reason():
    net = Deformed()
    runner = SegmentedGraphRunner(net.segments(), watch=net)
    x = torch.rand(1, 3, 8, 8)
    assert torch.equal(runner(x), net(x))
    assert all("on cpu" in reason for reason in runner.info().fallbacks)
    assert len(runner.info().fallbacks) == 3


@pytest.mark.parametrize("segments, match", [([], "at least one"), ([lambda x: x], "Segment\\(fn"),
                                             ([Segment(lambda x: x, False)], None)])
def test_bad_segments_are_refused(segments, match):
    if match is None:
        runner = SegmentedGraphRunner(segments)
        with pytest.raises(GraphConfigError, match="no segment is graphed"):
            runner.capture(torch.zeros(1))
        return
    with pytest.raises(GraphConfigError, match=match):
        SegmentedGraphRunner(segments)


def test_bad_mode_names_the_value():
    with pytest.raises(GraphConfigError, match="mode='always'"):
        SegmentedGraphRunner([Segment(lambda x: x, True)], mode="always")


def test_verify_segmented_passes_for_faithful_replays_and_names_a_stale_segment(emulated_runner):
    from libreyolo_cudagraph import verify_segmented

    net = Deformed()
    runner = SegmentedGraphRunner(net.segments(), make_runner=emulated_runner, watch=net, name="net")
    a, b = torch.rand(1, 3, 8, 8), torch.rand(1, 3, 8, 8)
    with torch.no_grad():
        report = verify_segmented(runner, (a,), (b,))
    assert report.ok and report.graphed and report.signature is not None and report.signature.count("; ") == 2
    cpu = SegmentedGraphRunner(net.segments(), watch=net, name="cpu")  # real runners: CPU inputs stay eager
    with torch.no_grad():
        refused = verify_segmented(cpu, (a,), (b,))
    assert not refused.ok and not refused.graphed and "on cpu" in (refused.reason or "")
