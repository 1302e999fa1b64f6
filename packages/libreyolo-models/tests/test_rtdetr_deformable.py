"""The deterministic sampling path of RT-DETR's deformable attention (used for CUDA backwards in
deterministic mode) computes what ``grid_sample`` computes, values and gradients."""

from __future__ import annotations

import torch

from libreyolo_models.layers.detr.deformable import _gather_bilinear, _grid_sample, sample_levels
from libreyolo_models.layers.detr.determinism import needs_deterministic_backward


def test_gather_bilinear_equals_grid_sample_in_values_and_gradients() -> None:
    g = torch.Generator().manual_seed(0)
    v = torch.randn(6, 5, 7, 9, dtype=torch.float64, generator=g).requires_grad_()
    grid = (torch.rand(6, 11, 4, 2, dtype=torch.float64, generator=g) * 2.6 - 1.3).requires_grad_()  # some outside
    weights = torch.randn(6, 5, 11, 4, dtype=torch.float64, generator=g)
    ref, ours = _grid_sample(v, grid), _gather_bilinear(v, grid)
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-12)
    ref_grads = torch.autograd.grad((ref * weights).sum(), (v, grid))
    our_grads = torch.autograd.grad((ours * weights).sum(), (v, grid))
    for a, b in zip(our_grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)


def test_multi_level_sampling_shapes_and_the_cpu_policy() -> None:
    shapes = [(4, 4), (2, 2)]
    value = torch.randn(2, 20, 8, 4)
    locations = torch.rand(2, 5, 8, 6, 2)
    weights = torch.rand(2, 5, 8, 6).softmax(-1)
    assert sample_levels(value, shapes, locations, weights, [3, 3]).shape == (2, 5, 32)
    assert sample_levels(value, shapes, locations, weights, [4, 2]).shape == (2, 5, 32)  # per-level counts
    saved = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        assert not needs_deterministic_backward(value)  # CPU backwards are deterministic already
    finally:
        torch.use_deterministic_algorithms(saved)
