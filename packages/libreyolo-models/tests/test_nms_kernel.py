"""Our NMS runs torchvision's kernel without importing the torchvision package, with the same
results as ``torchvision.ops`` on both of its batched strategies, and falls back to the package."""

from __future__ import annotations

import pytest
import torch
import torchvision

from libreyolo_models.layers import nms_kernel


def _boxes(n: int, nc: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g, dtype=torch.float64) * 300
    wh = torch.rand(n, 2, generator=g, dtype=torch.float64) * 80 + 1
    return torch.cat((xy, xy + wh), 1), torch.rand(n, generator=g, dtype=torch.float64), torch.randint(0, nc, (n,), generator=g)


@pytest.mark.parametrize("n", [0, 1, 300, 2_000])  # 2,000 boxes = 8,000 coordinates: one NMS per class on the CPU
def test_batched_nms_equals_torchvisions(n: int) -> None:
    boxes, scores, classes = _boxes(n, 5, seed=n)
    want = torchvision.ops.batched_nms(boxes, scores, classes, 0.5)
    got = nms_kernel.batched_nms(boxes, scores, classes, 0.5)
    assert got.dtype == torch.int64 and torch.equal(got, want)
    assert torch.equal(nms_kernel.nms(boxes, scores, 0.5), torchvision.ops.nms(boxes, scores, 0.5))


def test_without_the_extension_the_package_loader_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nms_kernel, "_registered", lambda: False)
    monkeypatch.setattr(nms_kernel, "_load_extension", lambda: False)
    nms_kernel._nms_op.cache_clear()
    try:
        boxes, scores, _ = _boxes(50, 1, seed=3)
        assert torch.equal(nms_kernel.nms(boxes, scores, 0.4), torchvision.ops.nms(boxes, scores, 0.4))
    finally:
        nms_kernel._nms_op.cache_clear()


def test_no_torchvision_on_the_path_means_no_direct_load(monkeypatch: pytest.MonkeyPatch) -> None:
    from libreyolo_models.layers import torchvision_library

    monkeypatch.setattr(torchvision_library.importlib.util, "find_spec", lambda name: None)
    assert nms_kernel._load_extension() is False


def test_the_extension_is_found_where_the_package_is() -> None:
    assert nms_kernel._load_extension() is True  # already registered here: loading again is harmless


def test_an_extension_that_cannot_report_its_cuda_version_defers_to_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    class Silent:
        def _cuda_version(self) -> int:
            raise RuntimeError("no such operator")

    monkeypatch.setattr(nms_kernel.torch.ops, "torchvision", Silent(), raising=False)
    assert nms_kernel._cuda_matches() is False
