"""The heads' and losses' anchor cache: the grid ``make_anchors`` builds, built once per shape."""

from __future__ import annotations

import copy
import pickle

import torch

from libreyolo_models.layers.anchors import AnchorCache, make_anchors

SHAPES = [(8, 8), (4, 4), (2, 2)]
CPU = torch.device("cpu")


def test_cached_grid_equals_make_anchors_and_is_built_once_per_shape_and_dtype() -> None:
    cache = AnchorCache((8, 16, 32), offset=0.0, size=2)
    first = cache(SHAPES, device=CPU, dtype=torch.float32)
    expected = make_anchors(SHAPES, (8, 16, 32), device=CPU, dtype=torch.float32, offset=0.0)
    assert all(torch.equal(a, b) for a, b in zip(first, expected, strict=True))
    assert cache(SHAPES, device=CPU, dtype=torch.float32) is first  # no kernels the second time
    half = cache(SHAPES, device=CPU, dtype=torch.float16)
    assert half[0].dtype == torch.float16 and half is not first
    cache([(4, 4)], device=CPU, dtype=torch.float32)  # a third shape evicts the oldest (size=2)
    assert cache(SHAPES, device=CPU, dtype=torch.float32) is not first


def test_a_grid_first_built_under_inference_mode_can_be_saved_for_backward() -> None:
    cache = AnchorCache((8, 16, 32))
    with torch.inference_mode():
        anchors, strides = cache(SHAPES, device=CPU, dtype=torch.float32)
    assert not anchors.is_inference()
    dist = torch.rand(len(anchors), 2, requires_grad=True)
    ((anchors + dist) * strides).sum().backward()  # mul saves strides: fails for an inference tensor
    assert dist.grad is not None


def test_copies_and_pickles_of_a_module_start_with_an_empty_cache() -> None:
    cache = AnchorCache((8, 16, 32))
    cache(SHAPES, device=CPU, dtype=torch.float32)
    for clone in (copy.deepcopy(cache), pickle.loads(pickle.dumps(cache))):
        assert not clone._entries and clone.strides == (8, 16, 32)
        assert torch.equal(clone(SHAPES, device=CPU, dtype=torch.float32)[0], cache._entries[next(iter(cache._entries))][0])
