"""The 1-vs-2-rank identity for losses with several normalisers (``global_normalizers``: one
``[k]`` collective per call) and outputs of any tree shape (lists, dicts of lists).

Like ``rank_split.py``, but the simulated all-reduce adds the other rank's whole normaliser
vector. Import as ``from rank_pairs import assert_two_ranks_match_one_process``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def _map(tree: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(tree, torch.Tensor):
        return fn(tree)
    if isinstance(tree, dict):
        return {k: _map(v, fn) for k, v in tree.items()}
    return [_map(v, fn) for v in tree]


def _leaves(tree: Any) -> list[torch.Tensor]:
    if isinstance(tree, torch.Tensor):
        return [tree]
    values = tree.values() if isinstance(tree, dict) else tree
    return [leaf for v in values for leaf in _leaves(v)]


def assert_two_ranks_match_one_process(loss_fn: Callable[..., tuple[torch.Tensor, torch.Tensor]], full: Any,
                                       targets: torch.Tensor, normalizers: int) -> None:
    """``full``: leaf outputs (requires_grad) of 4 images in any tree; ranks take images 0-1 and 2-3.
    Checks the mean of the ranks' losses, items and gradients against one process on all four."""
    full_loss, full_items = loss_fn(full, targets)
    full_loss.backward()
    halves = [_map(full, lambda t, r=r: t[2 * r:2 * r + 2].detach().clone().requires_grad_()) for r in range(2)]
    mine = [targets[(targets[:, 0] >= 2 * r) & (targets[:, 0] < 2 * r + 2)] - torch.tensor([2.0 * r, 0, 0, 0, 0, 0])
            for r in range(2)]
    local: list[torch.Tensor] = []
    for r in range(2):
        loss_fn(halves[r], mine[r], normalizer_sum=lambda n: local.append(n.clone()) or n)
    assert local[0].shape == (normalizers,)  # every normaliser travels in one collective
    losses, items = [], []
    for r in range(2):
        loss, its = loss_fn(halves[r], mine[r], world_size=2, normalizer_sum=lambda n, r=r: n + local[1 - r])
        loss.backward()
        losses.append(loss.detach())
        items.append(its)
    torch.testing.assert_close(sum(losses) / 2, full_loss.detach())
    torch.testing.assert_close(sum(items) / 2, full_items)
    for index, out in enumerate(_leaves(full)):
        averaged = torch.cat([_leaves(halves[r])[index].grad for r in range(2)]) / 2
        torch.testing.assert_close(averaged, out.grad, rtol=1e-5, atol=1e-5 * out.grad.abs().max().item())
