"""The 1-vs-2-rank identity every dense detection loss must satisfy, as a reusable check.

A batch of 4 images is split over two simulated ranks of 2; each rank passes its positive count
through ``normalizer_sum`` (here: plus the other rank's, what the all-reduce-sum returns). The
mean of the ranks' gradients (what DDP's average does) must equal the one-process gradient, and
so must the mean of their losses and items. Import as ``from rank_split import ...`` (the tests
folder is on ``sys.path``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def leaves(outputs: list[torch.Tensor]) -> list[torch.Tensor]:
    return [o.detach().clone().requires_grad_() for o in outputs]


def assert_two_ranks_average_to_one_process(loss_fn: Callable, full: list[torch.Tensor], targets: torch.Tensor,
                                            *, background_rank: bool, **kwargs) -> None:
    """``full``: leaf outputs of 4 images; ``kwargs`` go to every ``loss_fn`` call. With
    ``background_rank`` the second rank's two images hold no box (its own count must be 0)."""
    full_loss, full_items = loss_fn(full, targets, **kwargs)
    full_loss.backward()
    halves = [leaves([o[2 * r:2 * r + 2] for o in full]) for r in range(2)]
    rank_targets = []
    for r in range(2):
        mine = targets[(targets[:, 0] >= 2 * r) & (targets[:, 0] < 2 * r + 2)].clone()
        mine[:, 0] -= 2 * r
        rank_targets.append(mine)
    local: list[torch.Tensor] = []
    for outputs, mine in zip(halves, rank_targets):
        loss_fn(outputs, mine, normalizer_sum=lambda n: local.append(n.clone()) or n, **kwargs)
    # A loss with several normalisers passes them as one vector (``loss_scale.global_normalizers``).
    assert bool((local[0] > 1).all()) and bool((local[1] == 0).all()) == background_rank

    losses, items = [], []
    for r in range(2):
        loss, its = loss_fn(halves[r], rank_targets[r], world_size=2,
                            normalizer_sum=lambda n, r=r: n + local[1 - r], **kwargs)  # the all-reduce-sum
        loss.backward()
        losses.append(loss.detach())
        items.append(its)
    for level, out in enumerate(full):
        averaged = torch.cat([halves[r][level].grad for r in range(2)]) / 2  # what DDP's mean does
        torch.testing.assert_close(averaged, out.grad, rtol=1e-5, atol=1e-5 * out.grad.abs().max().item())
    torch.testing.assert_close(sum(losses) / 2, full_loss.detach())
    torch.testing.assert_close(sum(items) / 2, full_items)

    # Control: normalizing per rank (no reduce) does NOT give the one-process gradient.
    naive = leaves([o[2:] for o in full])
    loss_fn(naive, rank_targets[1], world_size=2, **kwargs)[0].backward()
    assert not torch.allclose(naive[0].grad / 2, full[0].grad[2:], rtol=1e-3, atol=1e-6)
