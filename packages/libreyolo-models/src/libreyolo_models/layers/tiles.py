"""Tiled application of an image-to-image network: overlapping tiles, blended back together.

Restoration networks are trained on crops (NAFNet: 256 px) and run on whole photographs that may
be many times larger. Running them whole costs memory that grows with the picture, and networks
with global statistics (NAFNet's channel attention pools over the whole input) see statistics
unlike their training crops'. ``tiled_apply`` cuts the input into tiles of the training size that
overlap by ``overlap`` pixels, runs the network on batches of them, and blends the outputs with
weights that ramp down across the overlaps (never at the picture's border), so seams do not show.

The tile grid is a function of the input's shape only (Python integers, no data-dependent
shapes), so the whole thing can be captured in a CUDA graph for one input size. An input that
fits in one tile is passed to the network as it is: the tiled path and the plain call are then
the same computation, bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

TILES_PER_CALL = 8
"""Tiles of one image the network sees per call (times the batch): bounds the memory a call takes."""


def tile_starts(size: int, tile: int, overlap: int) -> list[int]:
    """First pixel of every tile along one side of ``size`` pixels: steps of ``tile - overlap``,
    the last tile flush with the far edge (so it may overlap its neighbour by more).

    Raises:
        ValueError: ``overlap`` is negative or leaves no step (``overlap >= tile``).
    """
    if tile < 1 or not 0 <= overlap < tile:
        raise ValueError(f"tile={tile}, overlap={overlap}: need tile >= 1 and 0 <= overlap < tile")
    if size <= tile:
        return [0]
    return [*range(0, size - tile, tile - overlap), size - tile]


def _ramp(length: int, overlap: int, *, rise: bool, fall: bool, device: torch.device) -> Tensor:
    """``[length]`` weights: 1 inside, rising linearly over the first ``overlap`` pixels (``rise``)
    and falling over the last ``overlap`` (``fall``); never 0, so every pixel has weight."""
    position = torch.arange(length, device=device, dtype=torch.float32)
    weight = torch.ones(length, device=device, dtype=torch.float32)
    if overlap > 0 and rise:
        weight = torch.minimum(weight, (position + 1) / (overlap + 1))
    if overlap > 0 and fall:
        weight = torch.minimum(weight, (length - position) / (overlap + 1))
    return weight


def tiled_apply(fn: Callable[[Tensor], Tensor], images: Tensor, tile: int, overlap: int, *,
                tiles_per_call: int = TILES_PER_CALL) -> Tensor:
    """``fn(images)`` computed tile by tile when the images are larger than ``tile``.

    Args:
        fn: ``[N, C, h, w] -> [N, C', h, w]`` (same spatial size), e.g. a restoration network.
        images: ``[B, C, H, W]``.
        tile: side of the square tiles (the network's training crop); a side shorter than it is
            one tile of its own length.
        overlap: pixels two neighbouring tiles share (at least); blended over.
        tiles_per_call: tile positions per call of ``fn`` (each holds the whole batch).

    Returns:
        ``[B, C', H, W]`` in ``fn``'s dtype; exactly ``fn(images)`` when ``H, W <= tile``.
    """
    b, _, h, w = images.shape
    if h <= tile and w <= tile:
        return fn(images)
    th, tw = min(tile, h), min(tile, w)
    ys, xs = tile_starts(h, th, overlap), tile_starts(w, tw, overlap)
    positions = [(y, x) for y in ys for x in xs]
    groups = [positions[i:i + tiles_per_call] for i in range(0, len(positions), tiles_per_call)]
    pieces = fn(torch.cat([images[:, :, y:y + th, x:x + tw] for y, x in groups[0]]))
    out = pieces.new_zeros((b, pieces.shape[1], h, w))
    total = pieces.new_zeros((1, 1, h, w))
    for index, group in enumerate(groups):
        if index:
            pieces = fn(torch.cat([images[:, :, y:y + th, x:x + tw] for y, x in group]))
        for k, (y, x) in enumerate(group):
            rows = _ramp(th, overlap, rise=y > 0, fall=y + th < h, device=images.device)
            cols = _ramp(tw, overlap, rise=x > 0, fall=x + tw < w, device=images.device)
            weight = (rows[:, None] * cols[None, :]).to(pieces.dtype)
            out[:, :, y:y + th, x:x + tw] += pieces[k * b:(k + 1) * b] * weight
            total[:, :, y:y + th, x:x + tw] += weight
    return out / total
