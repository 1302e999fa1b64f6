"""Anchor points and distance-based box coding for anchor-free heads.

Anchors sit at cell centres, ``(x + 0.5, y + 0.5)`` in grid units (YOLOX: at the corners, offset 0),
flattened row-major (y, then x) with levels in stride order: the layout upstream checkpoints and
their post-processing assume.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import Tensor


def level_shapes(maps: list[Tensor]) -> list[tuple[int, int]]:
    """``(H, W)`` of each ``[B, C, H, W]`` map, as the tensors report them (no ``int()``).

    Eagerly these are plain ints. While ``model.export`` traces the network they are symbolic
    sizes, so the anchors of an exported graph follow the image it is fed (``dynamic=True`` frees
    the image size); an ``int()`` here would freeze them at the traced size.
    """
    return [(m.shape[2], m.shape[3]) for m in maps]


def make_anchors(shapes: list[tuple[int, int]], strides: list[int] | tuple[int, ...], *,
                 device: torch.device, dtype: torch.dtype, offset: float = 0.5) -> tuple[Tensor, Tensor]:
    """Anchor points ``[A, 2]`` (grid units) and per-anchor strides ``[A, 1]`` for level shapes.

    ``offset`` 0.5 puts the points at cell centres; YOLOX decodes from cell corners (0.0).
    Built with ``arange`` on ``device`` (no host-to-device copy), so it is safe inside a CUDA graph.
    """
    points, stride_col = [], []
    for (h, w), s in zip(shapes, strides):
        ys = torch.arange(h, device=device, dtype=dtype) + offset
        xs = torch.arange(w, device=device, dtype=dtype) + offset
        gy, gx = torch.meshgrid(ys, xs, indexing="ij")
        points.append(torch.stack((gx, gy), -1).view(-1, 2))
        stride_col.append(torch.full((h * w, 1), s, device=device, dtype=dtype))
    return torch.cat(points), torch.cat(stride_col)


class AnchorCache:
    """``make_anchors`` results kept per ``(shapes, device, dtype)`` for one head or loss.

    An eager forward at batch 1 is bound by kernel launches, and the grid costs about twenty of
    them per call. The cache steps aside (computes afresh) whenever keeping a tensor would be
    wrong: while a CUDA graph captures (the graph records the grid kernels itself and never reads
    memory this cache could later drop), while tracing or compiling (the grid must stay in the
    exported graph, sized by the input), and for symbolic sizes. Entries are built outside
    inference mode, so a training step can save them for backward; copies and pickles of the
    owning module start empty.
    """

    def __init__(self, strides: list[int] | tuple[int, ...], *, offset: float = 0.5, size: int = 8) -> None:
        self.strides, self.offset, self.size = tuple(strides), offset, size
        self._entries: OrderedDict[tuple[object, ...], tuple[Tensor, Tensor]] = OrderedDict()

    def __call__(self, shapes: list[tuple[int, int]], *, device: torch.device, dtype: torch.dtype
                 ) -> tuple[Tensor, Tensor]:
        if not _cacheable(shapes, device):
            return make_anchors(shapes, self.strides, device=device, dtype=dtype, offset=self.offset)
        key = (tuple(shapes), device, dtype)
        hit = self._entries.get(key)
        if hit is None:
            with torch.inference_mode(False):
                hit = make_anchors(shapes, self.strides, device=device, dtype=dtype, offset=self.offset)
            self._entries[key] = hit
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return hit

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "_entries": OrderedDict()}


def _cacheable(shapes: list[tuple[int, int]], device: torch.device) -> bool:
    if not all(type(v) is int for hw in shapes for v in hw):  # symbolic sizes: an export trace
        return False
    if torch.jit.is_tracing() or torch.compiler.is_compiling():
        return False
    return not (device.type == "cuda" and torch.cuda.is_current_stream_capturing())


def distances_to_boxes(dist: Tensor, anchors: Tensor, dim: int = -1) -> Tensor:
    """Left/top/right/bottom distances from anchors to xyxy boxes (same units as the anchors)."""
    lt, rb = dist.chunk(2, dim)
    return torch.cat((anchors - lt, anchors + rb), dim)


def boxes_to_distances(anchors: Tensor, boxes: Tensor, max_dist: float, eps: float = 0.01) -> Tensor:
    """xyxy boxes to left/top/right/bottom distances, clamped to ``[0, max_dist - eps]`` (DFL range:
    the last bin's index is ``max_dist``; PicoDet keeps 0.1 below it, the others 0.01)."""
    x1y1, x2y2 = boxes.chunk(2, -1)
    return torch.cat((anchors - x1y1, x2y2 - anchors), -1).clamp(0, max_dist - eps)


def dfl_expectation(logits: Tensor, reg_max: int) -> Tensor:
    """Expected distance under a softmax over ``reg_max`` bins.

    ``logits`` is ``[B, 4 * reg_max, A]`` (side-major: l, t, r, b, each ``reg_max`` bins); returns
    ``[B, 4, A]`` in grid units.
    """
    b, _, a = logits.shape
    probs = logits.view(b, 4, reg_max, a).softmax(2)
    bins = torch.arange(reg_max, device=logits.device, dtype=probs.dtype).view(1, 1, reg_max, 1)
    return (probs * bins).sum(2)
