"""One augmented (or letterboxed) sample of an instance task: pixels, boxes, and each object's mask
or keypoints carried through the same geometry.

The pixels are detection's, op for op (``data.augment_ops.render_images`` on the tiles a
``SampleDraws`` names: mosaic or letterbox placement, one affine warp, HSV, flip), and so are the
boxes (``place_boxes``, ``transform_boxes``, ``keep_boxes``, ``flip_boxes``). What this adds:

- Masks: each object's mask is rasterised at its cached image's size, then every output pixel
  looks up the canvas pixel its centre maps back to (the inverse of the sample's affine map) in
  the mask of the tile that covers it, and the result is mirrored with the image. Nearest
  neighbour, so a mask never blurs, and it lines up with the image pixel for pixel (the image is
  sampled bilinearly at the same point). A segment object's box is then the tight box of its
  warped mask (a rotated polygon's box shrinks to fit, as the object's outline does).
- Keypoints: moved like box corners (tile pixels, plus the tile's canvas offset, through the
  affine map); a keypoint that leaves the output or was off the canvas gets visibility 0. A
  mirrored sample also swaps left and right keypoints by the dataset's ``flip_idx``.

Everything runs on the CPU in a DataLoader worker, one sample at a time; the draws come from
``data.augment_draws`` (seeded per sample), so a sample is a function of its seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ...contract.instances import MASK_STRIDE
from ...data.augment_draws import SampleDraws, affine_matrix
from ...data.augment_ops import (
    flip_boxes,
    grid_theta,
    keep_boxes,
    mosaic_offsets,
    render_images,
    transform_boxes,
)
from ...data.image_cache import ImageCache
from ...data.letterbox import letterbox_offsets, place_boxes
from .split import InstanceSplit


@dataclass
class InstanceSample:
    """One sample, as a worker hands it over.

    Attributes:
        image: ``uint8 [3, S, S]`` RGB.
        classes: ``int64 [n]``; boxes: ``float64 [n, 4]`` x1, y1, x2, y2 in output pixels.
        masks: ``bool [n, S, S]`` (segment) or None; keypoints: ``float32 [n, K, 3]`` x, y in
            output pixels and visibility (pose) or None.
        path: the main image's file; ori_size: its original ``(h, w)``.
        region: ``(x0, y0, x1, y1)`` the part of the output the main image covers (letterbox: all
            but the bars), where validation compares masks.
        index: the main image's index in the split (validation's image id).
    """

    image: Tensor
    classes: Tensor
    boxes: Tensor
    masks: Tensor | None
    keypoints: Tensor | None
    path: str
    ori_size: tuple[int, int]
    region: tuple[int, int, int, int]
    index: int = -1


def letterbox_draw(index: int, imgsz: int) -> SampleDraws:
    """The draw of an unaugmented sample: the image letterboxed, nothing else (validation)."""
    matrix = affine_matrix(canvas=imgsz, out_size=imgsz, degrees=0.0, scale=1.0, shear_x=0.0, shear_y=0.0,
                           translate_x=0.5, translate_y=0.5)
    return SampleDraws(index=index, is_mosaic=False, partners=(index, index, index), centre=(imgsz, imgsz),
                       canvas=imgsz, matrix=matrix, scale=1.0, hsv=(0.0, 1.0, 1.0), flip=False)


def compose_sample(cache: ImageCache, split: InstanceSplit, draw: SampleDraws, *, masks: bool = False,
                   keypoints: bool = False, flip_idx: Sequence[int] | None = None) -> InstanceSample:
    """Render ``draw``'s sample (see the module docstring); ``masks`` / ``keypoints``: carry the
    split's extras of that kind."""
    size = cache.imgsz
    tiles_idx = list(draw.tile_indices)
    tiles = torch.empty((1, len(tiles_idx), size, size, 3), dtype=torch.uint8)
    for t, i in enumerate(tiles_idx):
        cache.read_into(i, tiles[0, t].numpy())
    hw = torch.from_numpy(cache.hw[tiles_idx].astype(np.int64))[None]              # [1, K, 2]
    offsets = (mosaic_offsets(torch.tensor([draw.centre], dtype=torch.int64), hw) if draw.is_mosaic
               else letterbox_offsets(hw, size))
    matrix = torch.from_numpy(np.asarray(draw.matrix, dtype=np.float64))[None]
    flip = torch.tensor([draw.flip])
    has_hsv = draw.hsv != (0.0, 1.0, 1.0)
    pixels = render_images(tiles, offsets, hw, draw.canvas, grid_theta(matrix, draw.canvas, size),
                           torch.tensor([draw.hsv], dtype=torch.float32), flip, imgsz=size, has_hsv=has_hsv,
                           has_flip=draw.flip)
    image = pixels[0].round_().clamp_(0, 255).to(torch.uint8)

    table, extras = _label_table(split, tiles_idx)
    n = len(table)
    placed = place_boxes(table, offsets, hw, draw.canvas)
    warped = transform_boxes(placed, matrix.expand(n, 2, 3), size)
    mask_out = None
    if masks:
        mask_out = warp_masks(extras, table[:, 1].long(), hw[0], offsets[0], matrix[0], draw.canvas, size)
        warped = mask_boxes(mask_out)
    keep = keep_boxes(placed, warped, torch.full((n,), draw.scale, dtype=torch.float64))
    if mask_out is not None:
        keep &= mask_out.flatten(1).any(1)
    boxes = flip_boxes(warped, flip.expand(n), float(size))[keep]
    kp_out = None
    if keypoints:
        kp_out = warp_keypoints(extras, table[:, 1].long(), hw[0], offsets[0], matrix[0], draw.canvas, size,
                                flip=draw.flip, flip_idx=flip_idx)[keep]
    if mask_out is not None:
        mask_out = mask_out[keep].flip(-1) if draw.flip else mask_out[keep]
    h, w = (int(v) for v in hw[0, 0])
    x0, y0 = (int(v) for v in offsets[0, 0])
    region = (max(x0, 0), max(y0, 0), min(x0 + w, size), min(y0 + h, size))
    ori = tuple(int(v) for v in cache.ori_hw[draw.index])
    return InstanceSample(image, table[keep, 2].long(), boxes, mask_out, kp_out, str(split.images[draw.index]),
                          (ori[0], ori[1]), region, draw.index)


def _label_table(split: InstanceSplit, tiles_idx: Sequence[int]) -> tuple[Tensor, list[Any]]:
    """``float64 [n, 7]`` rows (sample 0, tile, class, cx, cy, w, h) of the tiles' labels and their extras."""
    parts, extras = [], []
    for t, i in enumerate(tiles_idx):
        rows = np.asarray(split.labels[i], dtype=np.float64).reshape(-1, 5)
        if len(rows):
            parts.append(np.column_stack((np.zeros(len(rows)), np.full(len(rows), t), rows)))
            extras += list(split.extras[i])
    table = np.concatenate(parts) if parts else np.zeros((0, 7))
    return torch.from_numpy(table), extras


def _output_to_canvas(matrix: Tensor, size: int) -> tuple[Tensor, Tensor]:
    """The canvas pixel (``int64 [S, S]`` x and y) each output pixel's centre maps back to."""
    full = torch.cat((matrix.double(), torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64)))
    inv = torch.linalg.inv(full)
    centres = torch.arange(size, dtype=torch.float64) + 0.5
    x, y = centres[None, :], centres[:, None]
    cx = inv[0, 0] * x + inv[0, 1] * y + inv[0, 2]
    cy = inv[1, 0] * x + inv[1, 1] * y + inv[1, 2]
    return cx.floor().long(), cy.floor().long()


def warp_masks(shapes: Sequence[Any], tile_of: Tensor, hw: Tensor, offsets: Tensor, matrix: Tensor, canvas: int,
               size: int) -> Tensor:
    """``bool [n, S, S]``: each object's mask (``shapes[i].rasterize(h, w)`` on its tile) through the
    sample's geometry, before the flip."""
    out = torch.zeros((len(shapes), size, size), dtype=torch.bool)
    if not len(shapes):
        return out
    cx, cy = _output_to_canvas(matrix, size)
    on_canvas = (cx >= 0) & (cx < canvas) & (cy >= 0) & (cy < canvas)
    for t in torch.unique(tile_of).tolist():
        rows = (tile_of == t).nonzero()[:, 0]
        h, w = (int(v) for v in hw[t])
        tx, ty = cx - int(offsets[t, 0]), cy - int(offsets[t, 1])
        inside = on_canvas & (tx >= 0) & (tx < w) & (ty >= 0) & (ty < h)
        bitmaps = torch.from_numpy(np.stack([np.asarray(shapes[int(r)].rasterize(h, w), dtype=bool) for r in rows]))
        out[rows] = bitmaps[:, ty.clamp(0, h - 1), tx.clamp(0, w - 1)] & inside
    return out


def mask_boxes(masks: Tensor) -> Tensor:
    """Tight ``float64 [n, 4]`` x1, y1, x2, y2 (pixel edges) of ``bool [n, H, W]`` masks; zeros when empty."""
    n, h, w = masks.shape
    if n == 0:
        return torch.zeros((0, 4), dtype=torch.float64)
    cols, rows = masks.any(1), masks.any(2)
    x = torch.arange(w)
    y = torch.arange(h)
    x1 = torch.where(cols, x, w).amin(1)
    x2 = torch.where(cols, x + 1, 0).amax(1)
    y1 = torch.where(rows, y, h).amin(1)
    y2 = torch.where(rows, y + 1, 0).amax(1)
    boxes = torch.stack((x1, y1, x2, y2), 1).double()
    return torch.where(cols.any(1)[:, None], boxes, torch.zeros_like(boxes))


def warp_keypoints(points: Sequence[Any], tile_of: Tensor, hw: Tensor, offsets: Tensor, matrix: Tensor, canvas: int,
                   size: int, *, flip: bool, flip_idx: Sequence[int] | None) -> Tensor:
    """``float32 [n, K, 3]`` keypoints (normalised to their tile) -> output pixels and visibility."""
    if not len(points):
        return torch.zeros((0, 0, 3), dtype=torch.float32)
    kp = torch.from_numpy(np.stack([np.asarray(p, dtype=np.float64) for p in points]))       # [n, K, 3]
    wh = hw[tile_of].flip(-1).double()[:, None]                                              # (w, h)
    xy = kp[..., :2] * wh + offsets[tile_of].double()[:, None]
    on_canvas = ((xy >= 0) & (xy < canvas)).all(-1)
    m = matrix.double()
    moved = xy @ m[:, :2].T + m[:, 2]
    visible = (kp[..., 2] > 0) & on_canvas & ((moved >= 0) & (moved < size)).all(-1)
    if flip:
        moved = torch.stack((size - moved[..., 0], moved[..., 1]), -1)
    out = torch.cat((moved, torch.where(visible, kp[..., 2], 0.0)[..., None]), -1).float()
    if flip and flip_idx is not None:
        out = out[:, list(flip_idx)]
    return out


def pool_masks(masks: Tensor, stride: int = MASK_STRIDE) -> Tensor:
    """``bool [n, S, S]`` -> ``uint8 [n, S / stride, S / stride]``: a cell is inside when at least
    half of its pixels are (the training targets' resolution)."""
    if masks.shape[0] == 0:
        side = masks.shape[-1] // stride
        return torch.zeros((0, side, side), dtype=torch.uint8)
    return (F.avg_pool2d(masks[:, None].float(), stride)[:, 0] >= 0.5).to(torch.uint8)
