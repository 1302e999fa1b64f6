"""Sliced (tiled) inference for small objects in large pictures: ``predict(tile=640)``.

A 4000 x 3000 photo letterboxed to 640 shrinks a 20-pixel object to 3 pixels, below what a
detector sees. Cut into overlapping ``tile x tile`` windows, each window reaches the network at
(nearly) its own resolution. What happens to one picture:

1. ``tile_windows``: windows of ``tile`` pixels with ``tile_overlap`` shared between neighbours
   (the last window of a row or column is moved back to end at the border, so every pixel is
   covered and no window is smaller than ``tile``, unless the picture is); with more than one
   window, the whole picture is one more "window", so objects larger than a tile are found too.
2. The picture goes to the device once; the windows are views of it, letterboxed there to the
   network's input like any image (``Task.prepare_batch``) and run ``TILE_BATCH`` at a time
   (a shorter last chunk padded, so a graphed predict replays one shape; a chunk of one, such as
   the whole picture after 16 tiles, runs at batch 1, the untiled predict's shape).
3. Each window's detections (the family's post-processing, the call's ``conf``/``iou``) are mapped
   back to the picture's pixels and merged (``layers.box_merge``: class-aware NMS, or a
   score-weighted merge with ``tile_merge="weighted"``); objects cut by a window's border are
   found whole by the neighbour that overlaps it.

When one window covers the picture (``tile`` at least its size), this is exactly the untiled
predict: the same letterbox, forward and post-processing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from ..data.letterbox_images import LetterboxInfo
from ..errors import ConfigError
from ..layers.box_merge import MergeMode, merge_detections
from ..layers.nms import scale_to_original
from ..tensor_trees import map_tensors

TILE_BATCH = 16
"""Windows per forward pass (a 4K picture at 640-pixel tiles, 20 % overlap, is ~48 windows)."""


def tile_windows(h: int, w: int, tile: int, overlap: float) -> list[tuple[int, int, int, int]]:
    """``(x0, y0, x1, y1)`` windows covering an ``h x w`` picture, row by row; one window when
    the picture fits in a tile, else the tiles and then the whole picture."""
    if tile < 1:
        raise ConfigError(f"tile={tile} must be a window size in pixels (e.g. 640), or None to predict untiled")
    if not 0.0 <= overlap < 1.0:
        raise ConfigError(f"tile_overlap={overlap} must be in [0, 1): the share of a tile its neighbour repeats")
    step = max(1, int(round(tile * (1.0 - overlap))))

    def starts(size: int) -> list[int]:
        if size <= tile:
            return [0]
        out = list(range(0, size - tile, step))
        return out + [size - tile]

    windows = [(x, y, min(x + tile, w), min(y + tile, h)) for y in starts(h) for x in starts(w)]
    if len(windows) > 1:
        windows.append((0, 0, w, h))
    return windows


class TiledPredict:
    """Runs predict's forward and post-processing over the windows of one picture at a time.

    Args:
        prepare: ``Task.prepare_batch`` bound to the image size, dtype and device:
            ``(images, orig_shapes) -> (input [N, 3, S, S], infos)``.
        forward: predict's forward (eager, graphed or compiled) on that input.
        postprocess: the family's post-processing with this call's options.
        pad: ``predict.predictor.pad_rows`` (a short last chunk runs at the full chunk's shape).
    """

    def __init__(self, *, tile: int, overlap: float, merge: MergeMode, iou: float, max_det: int, agnostic: bool,
                 prepare: Callable[[Sequence[Tensor], Sequence[tuple[int, int]]], tuple[Tensor, list[Any]]],
                 forward: Callable[[Tensor], Any], postprocess: Callable[[Any], list[Tensor]],
                 pad: Callable[[Tensor, int], Tensor]) -> None:
        self.tile, self.overlap, self.merge = tile, overlap, merge
        self.iou, self.max_det, self.agnostic = iou, max_det, agnostic
        self.prepare, self.forward, self.postprocess, self.pad = prepare, forward, postprocess, pad

    def __call__(self, picture: Tensor) -> tuple[Tensor, Any]:
        """``uint8 [H, W, 3]`` on the device -> (detections ``[N, 6]`` and the mapping back that
        ``Task.make_results`` applies). With one window the mapping is that window's letterbox
        (the untiled path exactly); with several, detections are already in picture pixels."""
        h, w = int(picture.shape[0]), int(picture.shape[1])
        windows = tile_windows(h, w, self.tile, self.overlap)
        crops = [picture[y0:y1, x0:x1] for x0, y0, x1, y1 in windows]
        if len(windows) == 1:
            (det,), infos = self._run(crops)
            return det, infos[0]
        found: list[Tensor] = []
        for start in range(0, len(crops), TILE_BATCH):
            chunk = windows[start:start + TILE_BATCH]
            dets, infos = self._run(crops[start:start + TILE_BATCH])
            for (x0, y0, x1, y1), det, info in zip(chunk, dets, infos):
                placed = scale_to_original(det.float(), info.ratio, info.pad, (y1 - y0, x1 - x0))
                placed[:, [0, 2]] += x0
                placed[:, [1, 3]] += y0
                found.append(placed)
        merged = merge_detections(torch.cat(found), iou=self.iou, max_det=self.max_det, mode=self.merge,
                                  agnostic=self.agnostic)
        return merged, LetterboxInfo(1.0, (0.0, 0.0), (h, w))

    def _run(self, crops: list[Tensor]) -> tuple[list[Tensor], list[Any]]:
        n = len(crops)
        x, infos = self.prepare(crops, [(int(c.shape[0]), int(c.shape[1])) for c in crops])
        padded = n > 1 and n < TILE_BATCH
        with torch.inference_mode():
            out = self.forward(self.pad(x, TILE_BATCH) if padded else x)
            if padded:
                out = map_tensors(out, lambda t: t[:n])
        return self.postprocess(out), infos
