"""Taking decisions together (a minimum over ranks on a CPU group) and averaging gradients without
the DDP wrapper: two Gloo ranks on CPU."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch

import libreyolo_ddp as ddp
from libreyolo_ddp import DevicePlan

TESTS_DIR = Path(__file__).resolve().parent


def test_without_a_process_group_votes_and_averages_are_the_identity() -> None:
    assert ddp.agree_min(3) == 3 and ddp.agree_all(True) and not ddp.agree_all(False)
    net = torch.nn.Linear(2, 1)
    net(torch.ones(1, 2)).sum().backward()
    before = [p.grad.clone() for p in net.parameters()]
    assert ddp.average_gradients(net.parameters()) == 2
    assert all(torch.equal(a, p.grad) for a, p in zip(before, net.parameters()))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_ranks_agree_on_the_minimum_and_average_gradients_exactly() -> None:
    if str(TESTS_DIR) not in sys.path:
        sys.path.insert(0, str(TESTS_DIR))  # spawn hands sys.path to its workers
    targets = importlib.import_module("ddp_spawn_targets")
    facts = ddp.spawn(targets.vote_and_average, ("x",), devices=DevicePlan.cpu_workers(2),
                      env={"OMP_NUM_THREADS": "1"})
    assert facts["min"] == 5 and facts["all_true"] is True and facts["one_false"] is False
    assert facts["averaged"] == 2
    assert facts["grads"] == facts["expected"]  # (g0 + g1) / 2, bit for bit
    assert facts["weights"][0] == facts["weights"][1]  # broadcast_parameters synced the ranks
