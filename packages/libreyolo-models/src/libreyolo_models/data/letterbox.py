"""Putting cached images on a square canvas, for pixels and for boxes alike.

A cached image sits top-left in an ``S x S`` slot with its true ``(h, w)`` beside it (see
``image_cache``). The letterbox centres one image on an ``S x S`` canvas filled with 114 (the grey
YOLO models were trained with); the mosaic places four images around a centre on a ``2S x 2S``
canvas. Both are "put tile ``k`` of sample ``b`` at offset ``(x, y)``, clip to the canvas", so one
function does it for pixels and one for boxes, and the validation path, the CPU training path and
the GPU training path all call them.

Coordinates are continuous pixels: pixel ``i`` spans ``[i, i + 1)``, so a box edge at ``x`` and
the image edge at ``w`` compare directly.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..layers.boxes import xyxy_to_xywh

FILL = 114
"""Canvas value outside every image (letterbox bars, mosaic gaps, warp borders)."""

LABEL_COLUMNS = 7
"""Label rows on their way to a canvas: (sample, tile, class, cx, cy, w, h), box normalized."""


def letterbox_offset(h: int, w: int, imgsz: int) -> tuple[int, int]:
    """Top-left ``(x, y)`` of an ``h x w`` image centred on an ``imgsz`` square (floor on odd pads)."""
    return (imgsz - w) // 2, (imgsz - h) // 2


def letterbox_offsets(hw: Tensor, imgsz: int) -> Tensor:
    """:func:`letterbox_offset` for ``int64 [..., 2]`` sizes ``(h, w)`` -> ``[..., 2]`` ``(x, y)``."""
    return torch.stack(((imgsz - hw[..., 1]) // 2, (imgsz - hw[..., 0]) // 2), dim=-1)


def letterbox_map(ori_hw: tuple[int, int], hw: tuple[int, int], imgsz: int
                  ) -> tuple[float, tuple[int, int]]:
    """``(ratio, (pad_x, pad_y))`` taking input pixels back to the original image.

    ``x_original = (x_input - pad_x) / ratio`` (same for y). ``ratio`` is the resize factor the
    cache applied (long side to ``imgsz``); ``hw`` is the cached size, which sets the padding.
    """
    ratio = imgsz / max(ori_hw)
    return ratio, letterbox_offset(hw[0], hw[1], imgsz)


def place_tiles(tiles: Tensor, offsets: Tensor, hw: Tensor, canvas: int, fill: int = FILL) -> Tensor:
    """Paste tiles onto a filled canvas: the pixel half of both letterbox and mosaic.

    On the CPU, one slice copy per tile. On a GPU those B x K copies (128 for a batch of 32 mosaic
    samples) would each cost a launch and several dispatches of host time, in a training step
    that is launch-bound, and their bounds would be baked into a CUDA graph; there
    :func:`place_tiles_scattered` writes every tile in one indexed copy (or, under
    ``torch.use_deterministic_algorithms``, where that copy would sort its indices,
    :func:`place_tiles_gathered` in a few gathers per tile slot). All give the same bytes. Tiles
    do not overlap in either use (where they would, the loop's later tile wins; the scattered
    copy's winner is undefined there). The result may be a view into a slightly larger buffer.

    Args:
        tiles: ``uint8 [B, K, T, T, 3]`` cached slots; tile ``k`` of sample ``b`` uses its
            top-left ``hw[b, k]`` region, the rest is never read.
        offsets: ``int64 [B, K, 2]`` canvas ``(x, y)`` of each tile's top-left corner; may be
            negative or run past the canvas (the tile is then cropped). On the CPU: it is read
            into Python ints to slice with.
        hw: ``int64 [B, K, 2]`` used ``(h, w)`` of each tile (read into Python ints on the CPU).
        canvas: side of the square canvas in pixels.
        fill: value of canvas pixels no tile covers.

    Returns:
        ``uint8 [B, canvas, canvas, 3]`` on the tiles' device.
    """
    if tiles.device.type == "cuda":
        if torch.are_deterministic_algorithms_enabled():
            return place_tiles_gathered(tiles, offsets, hw, canvas, fill)
        return place_tiles_scattered(tiles, offsets, hw, canvas, fill)
    batch = tiles.shape[0]
    out = torch.full((batch, canvas, canvas, tiles.shape[-1]), fill, dtype=tiles.dtype, device=tiles.device)
    for b, (sample_offsets, sample_hw) in enumerate(zip(offsets.tolist(), hw.tolist())):
        for k, ((ox, oy), (h, w)) in enumerate(zip(sample_offsets, sample_hw)):
            paste(out[b], tiles[b, k, :h, :w], ox, oy)
    return out


def place_tiles_gathered(tiles: Tensor, offsets: Tensor, hw: Tensor, canvas: int, fill: int = FILL) -> Tensor:
    """:func:`place_tiles` with a number of kernels that grows with ``K``, not ``B x K``.

    For each tile slot ``k`` the whole batch's tiles are laid onto canvas coordinates by two
    gathers (rows, then columns; each canvas row and column maps to one tile row and column, so
    the index stays ``[B, S]``-sized), then kept where the tile covers the pixel. Pure copies: the
    result equals the loop's byte for byte.
    """
    batch, slots, side = tiles.shape[0], tiles.shape[1], tiles.shape[2]
    channels, device = tiles.shape[-1], tiles.device
    offsets, hw = offsets.to(device, non_blocking=True), hw.to(device, non_blocking=True)  # no stream sync
    coords = torch.arange(canvas, device=device)
    out = torch.full((batch, canvas, canvas, channels), fill, dtype=tiles.dtype, device=device)
    for k in range(slots):
        rows = coords[None] - offsets[:, k, 1:2]                     # [B, S] tile row of each canvas row
        cols = coords[None] - offsets[:, k, 0:1]                     # [B, S] tile column of each canvas column
        row_in = (rows >= 0) & (rows < hw[:, k, 0:1])
        col_in = (cols >= 0) & (cols < hw[:, k, 1:2])
        rows, cols = rows.clamp(0, side - 1), cols.clamp(0, side - 1)
        by_rows = tiles[:, k].gather(1, rows[:, :, None, None].expand(batch, canvas, side, channels))
        placed = by_rows.gather(2, cols[:, None, :, None].expand(batch, canvas, canvas, channels))
        covered = row_in[:, :, None, None] & col_in[:, None, :, None]
        out = torch.where(covered, placed, out)
    return out


def place_tiles_scattered(tiles: Tensor, offsets: Tensor, hw: Tensor, canvas: int, fill: int = FILL) -> Tensor:
    """:func:`place_tiles` for tiles that do not overlap, in one indexed copy of the tiles.

    Each tile row goes to one canvas row and each tile column to one canvas column, so a pixel's
    place on the canvas is its row's offset plus its column's: one index tensor of the tiles'
    ``[B, K, T, T]`` shape, built by one broadcast add (one tensor rather than three, which is what
    separate sample, row and column indices would become on a GPU, where indexing makes broadcast
    index tensors of unlike strides contiguous). Pixels outside a tile's used ``h x w`` or off the
    canvas land in a spare row or column past the canvas's edge, which the returned view leaves out.
    The gathers of :func:`place_tiles_gathered`, which read and write the whole canvas once per tile
    slot, took 5.7 ms for a batch of 32 mosaics at 640 px on an H200, this copy with three index
    tensors 2.6 ms (``tools/probe_render.py``; the one-tensor form not yet measured there).
    Pure copies: the same bytes as the loop.
    """
    batch, side, channels, device = tiles.shape[0], tiles.shape[2], tiles.shape[-1], tiles.device
    offsets, hw = offsets.to(device, non_blocking=True), hw.to(device, non_blocking=True)
    steps = torch.arange(side, device=device)
    rows = offsets[..., 1:2] + steps                                # [B, K, T] canvas row of each tile row
    cols = offsets[..., 0:1] + steps                                # [B, K, T] canvas column of each tile column
    rows = torch.where((steps < hw[..., 0:1]) & (rows >= 0) & (rows < canvas), rows, canvas)
    cols = torch.where((steps < hw[..., 1:2]) & (cols >= 0) & (cols < canvas), cols, canvas)
    width = canvas + 1                                              # the spare column
    first = torch.arange(batch, device=device).view(batch, 1, 1) * (width * width)
    where = (rows * width + first)[..., :, None] + cols[..., None, :]  # [B, K, T, T] pixel of the canvas
    out = torch.full((batch, width, width, channels), fill, dtype=tiles.dtype, device=device)
    out.view(-1, channels)[where] = tiles
    return out[:, :canvas, :canvas]


def paste(canvas: Tensor, tile: Tensor, x: int, y: int) -> None:
    """Copy ``tile`` (``[h, w, C]``) onto ``canvas`` (``[S, S, C]``) with its top-left at ``(x, y)``.

    The part of the tile off the canvas is cropped; one slice copy (one kernel on a GPU).
    """
    h, w, side_h, side_w = tile.shape[0], tile.shape[1], canvas.shape[0], canvas.shape[1]
    x0, x1 = max(x, 0), min(x + w, side_w)
    y0, y1 = max(y, 0), min(y + h, side_h)
    if x1 > x0 and y1 > y0:
        canvas[y0:y1, x0:x1] = tile[y0 - y:y1 - y, x0 - x:x1 - x]


def to_network_input(images: Tensor, dtype: torch.dtype = torch.float32, *, channels_last: bool = False) -> Tensor:
    """Letterboxed ``uint8 [B, 3, S, S]`` pixels -> the network's ``[B, 3, S, S]`` input in [0, 1].

    Validation and predict both end here, so a model sees the same numbers from either: the
    division happens in float32 and only then is the result cast to ``dtype`` (fp16 weights get
    the rounding of one cast, whichever path made the batch). Runs on the images' device.
    ``channels_last``: lay the result out NHWC, as a channels_last network wants it (predict's
    letterbox already is, so that costs no copy); the values are the same either way.
    """
    layout = torch.channels_last if channels_last else torch.contiguous_format
    return images.float().div_(255.0).to(dtype).contiguous(memory_format=layout)


def place_boxes(labels: Tensor, offsets: Tensor, hw: Tensor, canvas: int) -> Tensor:
    """Boxes of tile images moved onto the canvas, clipped to the part of their tile it shows.

    The box half of :func:`place_tiles`; computed in float64 so that the same boxes come out
    whether one sample or a whole batch goes through.

    Args:
        labels: ``[M, 7]`` rows (sample, tile, class, cx, cy, w, h), box normalized to the tile's
            image (the split's labels are normalized to the original, which the cache only
            rescaled, so they carry over).
        offsets: ``int64 [B, K, 2]`` as for :func:`place_tiles`, on ``labels``' device.
        hw: ``int64 [B, K, 2]`` as for :func:`place_tiles`, on ``labels``' device.
        canvas: side of the square canvas in pixels.

    Returns:
        ``float64 [M, 4]`` xyxy boxes in canvas pixels; a box cropped away entirely has zero
        width or height (the degenerate-box filter drops it later).
    """
    sample, tile = labels[:, 0].long(), labels[:, 1].long()
    origin = offsets[sample, tile].double()                 # (x, y) of the tile on the canvas
    size = hw[sample, tile].double().flip(-1)               # (w, h) in pixels
    centre = labels[:, 3:5].double() * size + origin
    half = labels[:, 5:7].double() * size / 2
    low = origin.clamp(min=0.0)
    high = (origin + size).clamp(max=float(canvas))
    x1y1 = torch.minimum(torch.maximum(centre - half, low), high)
    x2y2 = torch.minimum(torch.maximum(centre + half, low), high)
    return torch.cat((x1y1, x2y2), dim=1)


def to_targets(sample: Tensor, cls: Tensor, boxes: Tensor, imgsz: int) -> Tensor:
    """Training targets from canvas boxes: ``float32 [M, 6]`` (sample, class, cx, cy, w, h).

    The box is normalized to the ``imgsz x imgsz`` network input, the format the loss reads.
    """
    xywh = xyxy_to_xywh(boxes) / imgsz
    return torch.cat((sample[:, None].to(xywh.dtype), cls[:, None].to(xywh.dtype), xywh), dim=1).float()
