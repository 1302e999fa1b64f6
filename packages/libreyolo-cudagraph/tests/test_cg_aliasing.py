"""Parameters under stand-ins: shared modules and tied parameters get their ``Parameter`` back.

The CPU tests pin the swap itself; the GPU test is the case that found it, a head whose conv is
shared across three levels (RTMDet's), trained graphed: every gradient bit-identical to eager and
the module still holding the optimizer's parameters afterwards.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from libreyolo_cudagraph import GraphedTraining, compare_train_step
from libreyolo_cudagraph.aliasing import parameters_replaced


class SharedHead(nn.Module):
    """One conv used at three levels, a per-level BatchNorm, and a weight tied across two modules."""

    def __init__(self) -> None:
        super().__init__()
        shared = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.stem = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.levels = nn.ModuleList(nn.Sequential(shared, nn.BatchNorm2d(8), nn.SiLU()) for _ in range(3))
        self.out_a, self.out_b = nn.Conv2d(8, 2, 1), nn.Conv2d(8, 2, 1)
        self.out_b.weight = self.out_a.weight  # one Parameter registered in two modules

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        f = self.stem(x)
        outs = []
        for level in self.levels:
            f = level(f)
            outs.append(self.out_a(f) + self.out_b(f))
            f = nn.functional.max_pool2d(f, 2)
        return outs


def _identities(module: nn.Module) -> list[int]:
    return [id(t) for sub in module.modules() for t in sub._parameters.values() if t is not None]


def test_every_slot_holds_the_stand_in_inside_and_its_parameter_after() -> None:
    net = SharedHead()
    before = _identities(net)
    stand_ins = {id(p): p.detach().clone().requires_grad_() for p in net.parameters()}
    with parameters_replaced(net, stand_ins):
        inside = _identities(net)
        assert all(i in {id(t) for t in stand_ins.values()} for i in inside)
        out = net(torch.rand(1, 3, 32, 32))
    assert _identities(net) == before
    assert all(isinstance(p, nn.Parameter) for p in net.parameters())
    grads = torch.autograd.grad(sum(o.sum() for o in out), list(stand_ins.values()), allow_unused=True)
    assert all(g is not None for g in grads)  # the shared conv and the tied weight were really used


def test_the_parameters_come_back_when_the_forward_raises() -> None:
    net = SharedHead()
    before = _identities(net)
    stand_ins = {id(p): p.detach().clone() for p in net.parameters()}
    with pytest.raises(RuntimeError), parameters_replaced(net, stand_ins):
        net(torch.rand(1, 5, 32, 32))  # wrong channel count
    assert _identities(net) == before


@pytest.mark.cuda
@pytest.mark.usefixtures("deterministic_cudnn")
def test_a_shared_conv_trains_graphed_like_eager_and_keeps_its_parameters() -> None:
    x = torch.rand(4, 3, 64, 64)

    def loss_fn(out, _inputs):  # noqa: ANN001, ANN202
        return sum((o.float() ** 2).mean() for o in out)

    report = compare_train_step(SharedHead, lambda: (x,), loss_fn, autocast_dtype=torch.float16)
    assert report.ok and report.graphed, report.summary()
    assert report.counts("grad")["exact"] == sum(report.counts("grad").values())

    torch.manual_seed(0)
    net = SharedHead().cuda().train()
    params = list(net.parameters())
    helper = GraphedTraining(net, repeat_threshold=1, warmup_iters=2)
    for _ in range(3):
        with torch.autocast("cuda", dtype=torch.float16, cache_enabled=False):
            loss = loss_fn(helper(x.cuda()), None)
        loss.backward()
    assert helper.info().replays > 0
    assert [id(p) for p in net.parameters()] == [id(p) for p in params]
    assert all(p.grad is not None for p in params)
    helper.release()
