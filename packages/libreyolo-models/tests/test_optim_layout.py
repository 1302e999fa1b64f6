"""Optimizer state restored across memory layouts (an NCHW run resumed in channels_last)."""

from __future__ import annotations

import torch
from torch import nn

from libreyolo_models.train.optim import align_state_layout


def _stepped(net: nn.Module) -> torch.optim.SGD:
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    net(torch.rand(2, 3, 8, 8)).square().mean().backward()
    opt.step()
    return opt


def test_restored_momentum_takes_its_parameters_layout_and_keeps_its_values() -> None:
    torch.manual_seed(0)
    saved_net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Conv2d(4, 2, 1))
    saved = _stepped(saved_net).state_dict()  # NCHW momentum buffers

    resumed_net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Conv2d(4, 2, 1)).to(memory_format=torch.channels_last)
    resumed_net.load_state_dict(saved_net.state_dict())
    opt = torch.optim.SGD(resumed_net.parameters(), lr=0.1, momentum=0.9)
    opt.load_state_dict(saved)
    weights = [p for p in resumed_net.parameters() if p.dim() == 4]
    assert all(opt.state[p]["momentum_buffer"].stride() != p.stride() for p in weights)

    assert align_state_layout(opt) == len(weights)  # biases (1-D) already matched
    for p, (_, ref) in zip(resumed_net.parameters(), sorted(saved["state"].items())):
        buf = opt.state[p]["momentum_buffer"]
        assert buf.stride() == p.stride() and torch.equal(buf, ref["momentum_buffer"])
    assert align_state_layout(opt) == 0
