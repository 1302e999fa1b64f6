"""GraphedTraining policy and autograd plumbing on CPU (captures emulated, see conftest.py)."""

from __future__ import annotations

import copy
import logging

import pytest
import torch
from torch import nn

from libreyolo_cudagraph import GraphConfigError, GraphedTraining, StaleGraphError


class TinyNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        feat = torch.relu(self.bn(self.conv(x)))
        return {"logits": self.head(feat.mean((2, 3))), "feat": feat}


def make_pair():
    torch.manual_seed(0)
    eager = TinyNet().train()
    return eager, copy.deepcopy(eager)


def batch(seed: int, n: int = 2, size: int = 6):
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(n, 3, size, size, generator=gen), torch.randint(0, 2, (n,), generator=gen)


def loss_of(out, y):
    return nn.functional.cross_entropy(out["logits"], y) + out["feat"].square().mean()


def test_capture_waits_until_the_shape_repeats(emulated_training):
    _, net = make_pair()
    graphed = emulated_training(net, repeat_threshold=3)
    for step in range(2):
        graphed(batch(step)[0])
    assert graphed.captures == 0 and graphed.info().eager_calls == 2
    graphed(batch(2)[0])
    assert graphed.captures == 1
    graphed(batch(3)[0])
    graphed(batch(4, size=8)[0])  # another shape: first sight, eager
    info = graphed.info()
    assert graphed.captures == 1 and info.replays == 2 and info.eager_calls == 3


def test_graphed_steps_match_eager_losses_gradients_and_buffers(emulated_training):
    eager, net = make_pair()
    graphed = emulated_training(net, repeat_threshold=2)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    opt_g = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    for step in range(6):
        x, y = batch(step)
        for model, call, opt in ((eager, eager, opt_e), (net, graphed, opt_g)):
            opt.zero_grad(set_to_none=True)
            loss = loss_of(call(x), y)
            loss.backward()
            model.last_loss = loss.detach()
            model.last_grads = [p.grad.clone() for p in model.parameters()]
            opt.step()
        assert torch.equal(eager.last_loss, net.last_loss), step
        assert all(torch.equal(a, b) for a, b in zip(eager.last_grads, net.last_grads)), step
    assert graphed.info().replays == 5
    for (name, a), b in zip(eager.state_dict().items(), net.state_dict().values()):
        assert torch.equal(a, b), name  # BatchNorm statistics updated once per step


def test_accumulating_two_micro_batches_without_zero_grad_matches_eager(emulated_training):
    eager, net = make_pair()
    graphed = emulated_training(net, repeat_threshold=1)
    for micro in range(2):
        x, y = batch(10 + micro)
        loss_of(eager(x), y).backward()
        loss_of(graphed(x), y).backward()
    assert graphed.info().replays == 2
    static = {g.data_ptr() for g in graphed.steps[0].static_grads if g is not None}
    for (name, a), b in zip(eager.named_parameters(), net.parameters()):
        assert torch.equal(a.grad, b.grad), name
        assert b.grad.data_ptr() not in static, f"{name}.grad aliases a static gradient buffer"


def test_inputs_that_require_grad_receive_their_gradient(emulated_training):
    eager, net = make_pair()
    graphed = emulated_training(net, repeat_threshold=1)
    x, y = batch(0)
    xe, xg = x.clone().requires_grad_(), x.clone().requires_grad_()
    loss_of(eager(xe), y).backward()
    loss_of(graphed(xg), y).backward()
    assert graphed.captures == 1 and torch.equal(xe.grad, xg.grad)


def test_eval_mode_and_no_grad_calls_run_eager(emulated_training):
    _, net = make_pair()
    graphed = emulated_training(net, repeat_threshold=1)
    graphed.eval()
    for _ in range(3):
        graphed(batch(0)[0])
    graphed.train()
    with torch.no_grad():
        graphed(batch(0)[0])
    assert graphed.captures == 0 and graphed.info().eager_calls == 4 and not graphed.info().fallbacks


def test_capture_failure_latches_the_helper_until_invalidated(emulated_training, caplog):
    eager, net = make_pair()
    graphed = emulated_training(net, repeat_threshold=1, fail_with=RuntimeError("capture invalidated"))
    x, _ = batch(0)
    with caplog.at_level(logging.INFO, logger="libreyolo_cudagraph"):
        for size in (6, 6, 8):
            graphed(batch(0, size=size)[0])
    assert graphed.captures == 1
    info = graphed.info()
    assert "capture invalidated" in info.latched and "rest of the run" in info.latched
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "capture invalidated" in warnings[0].getMessage()
    assert torch.equal(graphed(x)["logits"], eager(x)["logits"])
    graphed.fail_with = None
    graphed.invalidate("new head branch")
    graphed(x)
    assert graphed.captures == 2 and graphed.info().latched is None
    assert graphed.info().last_invalidation == "new head branch"


def test_replay_failure_latches_and_that_call_still_returns_eager_output(emulated_training):
    _, net = make_pair()
    graphed = emulated_training(net, repeat_threshold=1)
    x, _ = batch(0)
    graphed(x)
    graphed.steps[0].replay_forward = lambda: (_ for _ in ()).throw(RuntimeError("illegal memory access"))
    out = graphed(x)
    assert torch.equal(out["logits"], net(x)["logits"])
    assert "illegal memory access" in graphed.info().latched


def test_second_forward_before_backward_runs_eager_and_gradients_stay_right(emulated_training):
    eager, net = make_pair()
    graphed = emulated_training(net, repeat_threshold=1)
    (x1, _), (x2, _) = batch(1), batch(2)
    ref = (eager(x1)["logits"] - eager(x2)["logits"]).square().sum()  # siamese-style step
    ref.backward()
    out1 = graphed(x1)
    out2 = graphed(x2)
    (out1["logits"] - out2["logits"]).square().sum().backward()
    assert graphed.info().replays == 1
    assert any("awaits its backward" in r for r in graphed.info().fallbacks)
    for (name, a), b in zip(eager.named_parameters(), net.parameters()):
        assert torch.equal(a.grad, b.grad), name


def test_backward_through_reused_buffers_raises_stale_graph_error(emulated_training):
    _, net = make_pair()
    graphed = emulated_training(net, repeat_threshold=1)
    (x1, y1), (x2, _) = batch(1), batch(2)
    loss1 = loss_of(graphed(x1), y1)
    loss1.backward(retain_graph=True)
    graphed(x2)  # the first backward ran, so this forward replays and reuses the buffers
    with pytest.raises(StaleGraphError, match="reused its buffers"):
        loss1.backward()


def test_freezing_parameters_drops_graphs_and_frozen_grads_stay_none(emulated_training):
    eager, net = make_pair()
    graphed = emulated_training(net, repeat_threshold=1)
    x, y = batch(0)
    graphed(x)
    for model in (eager, net):
        model.conv.requires_grad_(False)
    loss_of(eager(x), y).backward()
    loss_of(graphed(x), y).backward()
    info = graphed.info()
    assert graphed.captures == 2 and info.invalidations == 1
    assert "trainable parameters changed" in info.last_invalidation
    assert net.conv.weight.grad is None
    assert torch.equal(net.head.weight.grad, eager.head.weight.grad)


def test_moving_the_module_drops_graphs(emulated_training):
    _, net = make_pair()
    graphed = emulated_training(net, repeat_threshold=1)
    graphed(batch(0)[0])
    graphed.double()
    out = graphed(batch(0)[0].double())
    assert out["logits"].dtype == torch.float64
    assert graphed.captures == 2 and "storage changed" in graphed.info().last_invalidation


def test_autocast_with_cache_enabled_runs_eager_with_the_fix_in_the_reason(
    emulated_training, cuda_autocast_tls
):
    _, net = make_pair()
    graphed = emulated_training(net, repeat_threshold=1)
    cuda_autocast_tls(True, torch.float16, cache=True)
    graphed(batch(0)[0])
    cuda_autocast_tls(False)
    assert graphed.captures == 0
    assert any("cache_enabled=False" in r for r in graphed.info().fallbacks)


def test_shapes_past_max_graphs_run_eager(emulated_training):
    _, net = make_pair()
    graphed = emulated_training(net, repeat_threshold=1, max_graphs=1)
    graphed(batch(0, size=6)[0])
    graphed(batch(0, size=8)[0])
    assert graphed.captures == 1
    assert any("max_graphs=1" in r for r in graphed.info().fallbacks)


def test_disabled_helper_is_always_eager(emulated_training):
    _, net = make_pair()
    graphed = emulated_training(net, repeat_threshold=1, enabled=False)
    for _ in range(3):
        graphed(batch(0)[0])
    assert graphed.captures == 0 and graphed.info().eager_calls == 3


def test_cpu_tensors_run_eager_on_the_real_helper():
    _, net = make_pair()
    graphed = GraphedTraining(net, repeat_threshold=1)
    x, y = batch(0)
    loss_of(graphed(x), y).backward()
    assert net.conv.weight.grad is not None
    assert graphed.info().fallbacks == {"input 0 is on cpu: CUDA graphs need CUDA tensors": 1}


@pytest.mark.parametrize("arg", ["repeat_threshold", "warmup_iters", "max_graphs"])
def test_bad_arguments_name_the_value(arg):
    with pytest.raises(GraphConfigError, match=f"{arg}=0"):
        GraphedTraining(TinyNet(), **{arg: 0})


class OtherRank:
    """Plays the other ranks of a distributed run: answers each vote with min(mine, theirs)."""

    def __init__(self, *theirs: int) -> None:
        self.theirs = list(theirs)
        self.mine: list[int] = []

    def __call__(self, mine: int) -> int:
        self.mine.append(mine)
        other = self.theirs.pop(0) if self.theirs else 2
        return min(mine, other)


def _step(graphed, seed: int) -> torch.Tensor:
    x, y = batch(seed)
    loss = loss_of(graphed(x), y)
    loss.backward()
    return loss.detach()


def test_every_training_call_votes_once_and_evaluation_never_votes(emulated_training):
    _, net = make_pair()
    votes = OtherRank()
    graphed = emulated_training(net, repeat_threshold=2, agree=votes)
    for step in range(4):
        _step(graphed, step)
    graphed.eval()
    with torch.no_grad():
        graphed(batch(9)[0])
    # eager, eager (threshold 2: capture), then the capture confirmation, then two replays
    assert votes.mine == [1, 2, 2, 2, 2] and graphed.captures == 1 and graphed.info().replays == 3


def test_a_step_another_rank_runs_eagerly_runs_eagerly_here_too(emulated_training):
    _, net = make_pair()
    votes = OtherRank(2, 1)  # the other rank is not ready when this one would capture
    graphed = emulated_training(net, repeat_threshold=2, agree=votes)
    _step(graphed, 0)
    _step(graphed, 1)
    info = graphed.info()
    assert graphed.captures == 0 and info.latched is None
    assert any("another rank runs this step eagerly" in reason for reason in info.fallbacks)


def test_a_capture_failure_on_another_rank_latches_every_rank(emulated_training):
    eager, net = make_pair()
    votes = OtherRank(2, 2, 0)  # the other rank's capture failed: its confirmation vote is 0
    graphed = emulated_training(net, repeat_threshold=2, agree=votes)
    losses = [_step(graphed, s) for s in range(4)]
    info = graphed.info()
    assert graphed.captures == 1 and not info.graphs and "another rank's capture" in info.latched
    expected = [loss_of(eager(batch(s)[0]), batch(s)[1]) for s in range(4)]
    assert all(torch.equal(a, b.detach()) for a, b in zip(losses, expected))  # eager results throughout


def test_a_failed_capture_here_is_announced_to_the_other_ranks(emulated_training):
    _, net = make_pair()
    votes = OtherRank()
    graphed = emulated_training(net, repeat_threshold=1, agree=votes, fail_with=RuntimeError("no capture"))
    _step(graphed, 0)
    _step(graphed, 1)
    assert votes.mine == [2, 0, 0]  # wanted to capture, failed and said so, latched from then on
    assert "capture failed" in graphed.info().latched
