"""Augmentation ops in torch, written once: per sample on the CPU, per batch on the GPU.

Every op takes a batch (``[B, ...]``) and works on any device, so the CPU training path (a
DataLoader worker calling them with ``B = 1``) and the GPU path (the main process calling them
with the whole batch) run the same code on the same draws (``augment_draws``). The only
differences between the paths are batch size and device, which is what the equivalence test
checks.

Order for one sample: place the tiles (mosaic: four on ``2S x 2S``; else the letterbox on
``S x S``), one affine warp to ``S x S`` (an affine sampling grid and bilinear ``grid_sample``,
114 outside), HSV jitter, horizontal flip. Boxes follow the same geometry in float64 (cheap, and
it keeps the box results identical between a batch of one and a batch of many) and are filtered
by one rule set, :func:`keep_boxes`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .letterbox import FILL, place_boxes, place_tiles, to_targets

MIN_SIDE_PX = 2.0
"""A warped box narrower or shorter than this (output pixels) is dropped."""
MIN_AREA_KEPT = 0.10
"""A warped box keeping less than this share of its (scaled) area before the warp is dropped."""
MAX_ASPECT = 20.0
"""A warped box longer than this many times its width (or the reverse) is dropped."""

_LEFT_TILES = (1, 0, 1, 0)  # tiles 0 (top-left) and 2 (bottom-left) end at the centre's x
_TOP_TILES = (1, 1, 0, 0)   # tiles 0 and 1 (top-right) end at the centre's y


# ---------------------------------------------------------------- mosaic


def mosaic_offsets(centre: Tensor, hw: Tensor) -> Tensor:
    """Canvas ``(x, y)`` of four tiles meeting at ``centre``: top-left, top-right, bottom-left,
    bottom-right, each touching the centre with one corner.

    Args:
        centre: ``int64 [B, 2]`` meeting point ``(x, y)`` on the ``2S`` canvas.
        hw: ``int64 [B, 4, 2]`` tile sizes ``(h, w)``.

    Returns:
        ``int64 [B, 4, 2]`` offsets for :func:`~libreyolo_models.data.letterbox.place_tiles`.
    """
    left = torch.tensor(_LEFT_TILES, dtype=hw.dtype, device=hw.device)
    top = torch.tensor(_TOP_TILES, dtype=hw.dtype, device=hw.device)
    x = centre[:, :1] - hw[..., 1] * left
    y = centre[:, 1:] - hw[..., 0] * top
    return torch.stack((x, y), dim=-1)


def mosaic(tiles: Tensor, hw: Tensor, centre: Tensor) -> Tensor:
    """Four cached images around ``centre`` on a ``2S x 2S`` canvas filled with 114.

    Args:
        tiles: ``uint8 [B, 4, S, S, 3]`` cached slots (main image first).
        hw: ``int64 [B, 4, 2]`` used ``(h, w)`` of each slot, on the CPU.
        centre: ``int64 [B, 2]`` meeting point on the canvas, on the CPU.

    Returns:
        ``uint8 [B, 2S, 2S, 3]``.
    """
    return place_tiles(tiles, mosaic_offsets(centre, hw), hw, 2 * tiles.shape[2])


# ---------------------------------------------------------------- affine warp


def grid_theta(matrix: Tensor, canvas: int, out_size: int) -> Tensor:
    """Normalized warp parameters (as ``affine_grid`` takes them) for warping a canvas with ``matrix``.

    ``matrix`` maps canvas pixels to output pixels; ``grid_sample`` needs the opposite direction
    in normalized coordinates (``align_corners=False``: -1 and 1 are the outer pixel edges, which
    matches continuous pixel coordinates). Composed in float64, handed over in float32.

    Args:
        matrix: ``float64 [B, 2, 3]`` canvas pixels -> output pixels.
        canvas: side of the square canvas being read.
        out_size: side of the square output.

    Returns:
        ``float32 [B, 2, 3]``.
    """
    batch = matrix.shape[0]
    bottom = matrix.new_tensor([0.0, 0.0, 1.0]).expand(batch, 1, 3)
    inverse = torch.linalg.inv(torch.cat((matrix.double(), bottom.double()), dim=1))
    to_unit = matrix.new_tensor([[2 / canvas, 0, -1], [0, 2 / canvas, -1], [0, 0, 1]]).double()
    half = out_size / 2
    from_unit = matrix.new_tensor([[half, 0, half], [0, half, half], [0, 0, 1]]).double()
    return (to_unit @ inverse @ from_unit)[:, :2].float()


def sampling_grid(theta: Tensor, out_size: int) -> Tensor:
    """``grid_sample`` coordinates ``[B, S, S, 2]`` for ``theta``, the job of ``F.affine_grid``.

    Built with elementwise multiply-adds rather than ``affine_grid``'s batched matmul: a matmul
    may run in TF32 on CUDA (``allow_tf32``, ``set_float32_matmul_precision("high")``), which would
    move the sampled points by a third of a pixel on a ``2S`` canvas; elementwise float32 does not
    depend on those settings, and gives the same grid on every device.
    """
    steps = (torch.arange(out_size, device=theta.device, dtype=torch.float32) * 2 + 1) / out_size - 1
    t = theta.to(torch.float32)[:, :, :, None, None]  # [B, 2, 3, 1, 1]
    x, y = steps[None, :], steps[:, None]            # output pixel centres, normalized
    grid = t[:, :, 0] * x + t[:, :, 1] * y + t[:, :, 2]  # [B, 2, S, S]
    return grid.permute(0, 2, 3, 1)


def warp_canvas(canvas: Tensor, theta: Tensor, out_size: int, fill: float = FILL) -> Tensor:
    """One affine warp per image, bilinear, ``fill`` wherever the source is off the canvas.

    ``grid_sample`` pads with zeros, so the canvas is shifted by ``-fill`` and back: the border
    then blends into ``fill`` exactly as an explicit grey surround would. The shift is also the
    conversion to float32 (``uint8 - float`` promotes), one pass over the canvas instead of two;
    the values are exact integers either way.

    Args:
        canvas: ``uint8 [B, H, W, 3]`` placed tiles (HWC, as the cache stores them).
        theta: ``float32 [B, 2, 3]`` from :func:`grid_theta`.
        out_size: side ``S`` of the square output.
        fill: value outside the canvas.

    Returns:
        ``float32 [B, 3, S, S]``, values in [0, 255].
    """
    # A float32 scalar tensor, not a Python float: uint8 - float would follow the default dtype.
    images = canvas.permute(0, 3, 1, 2).sub(torch.tensor(float(fill), dtype=torch.float32))
    grid = sampling_grid(theta.to(images.device), out_size)
    return F.grid_sample(images, grid, mode="bilinear", padding_mode="zeros", align_corners=False).add_(fill)


def transform_boxes(boxes: Tensor, matrix: Tensor, out_size: int) -> Tensor:
    """Boxes through their own image's affine map: the box enclosing the four moved corners,
    clipped to the output.

    Args:
        boxes: ``float64 [M, 4]`` xyxy canvas pixels.
        matrix: ``float64 [M, 2, 3]`` the map of each box's image.
        out_size: side of the square output.

    Returns:
        ``float64 [M, 4]`` xyxy output pixels within ``[0, out_size]``.
    """
    x1, y1, x2, y2 = boxes.unbind(1)
    corners = torch.stack((torch.stack((x1, y1), 1), torch.stack((x2, y1), 1),
                           torch.stack((x1, y2), 1), torch.stack((x2, y2), 1)), dim=1)  # [M, 4, 2]
    moved = corners @ matrix[:, :, :2].transpose(1, 2) + matrix[:, None, :, 2]
    return torch.cat((moved.amin(1), moved.amax(1)), dim=1).clamp(0.0, float(out_size))


def keep_boxes(before: Tensor, after: Tensor, scale: Tensor) -> Tensor:
    """Which warped boxes still show an object: the one rule set both paths apply.

    A box is dropped when its width or height is under :data:`MIN_SIDE_PX`, when it keeps less
    than :data:`MIN_AREA_KEPT` of its area before the warp times ``scale**2`` (mostly pushed off
    the image), or when its aspect ratio exceeds :data:`MAX_ASPECT` (a sliver at a border).

    Args:
        before: ``[M, 4]`` xyxy boxes on the canvas, before the warp.
        after: ``[M, 4]`` xyxy boxes after the warp and clipping.
        scale: ``[M]`` scale factor of each box's warp.

    Returns:
        ``bool [M]``.
    """
    w1, h1 = before[:, 2] - before[:, 0], before[:, 3] - before[:, 1]
    w2, h2 = after[:, 2] - after[:, 0], after[:, 3] - after[:, 1]
    tiny = 1e-9
    aspect = torch.maximum(w2 / (h2 + tiny), h2 / (w2 + tiny))
    return ((w2 >= MIN_SIDE_PX) & (h2 >= MIN_SIDE_PX)
            & (w2 * h2 >= MIN_AREA_KEPT * w1 * h1 * scale * scale) & (aspect <= MAX_ASPECT))


# ---------------------------------------------------------------- colour


def jitter_hsv(images: Tensor, gains: Tensor, *, max_value: float = 255.0) -> Tensor:
    """Shift hue and scale saturation and value, with each image's own gains (HSV hexcone model).

    Computed without materializing H, S, V separately: hue is kept in sixths of a turn, and each
    output channel is ``min' + chroma' * ramp`` where ``ramp`` is the hexcone's piecewise-linear
    channel weight at the shifted hue. About 30 elementwise passes, on any device.

    Args:
        images: ``float32 [B, 3, H, W]`` RGB in ``[0, max_value]``.
        gains: ``[B, 3]`` (hue shift in turns, saturation gain, value gain); ``(0, 1, 1)`` leaves
            an image as it is (up to float rounding).
        max_value: top of the pixel range.

    Returns:
        ``float32 [B, 3, H, W]`` in ``[0, max_value]``.
    """
    g = gains.to(images.device, images.dtype)[:, :, None, None]
    r, gr, b = images.unbind(1)
    value = images.amax(1)
    chroma = value - images.amin(1)
    # hue in sixths: which channel is the maximum picks the sector, the other two the position in it
    sixths = torch.where(value == r, gr - b, torch.where(value == gr, torch.add(b - r, chroma, alpha=2),
                                                         torch.add(r - gr, chroma, alpha=4)))
    sixths = sixths.div_(chroma.clamp(min=1e-12)).add_(6.0 * g[:, 0])
    saturation = (chroma / value.clamp(min=1e-12)).mul_(g[:, 1]).clamp_(0.0, 1.0)
    value = value.mul(g[:, 2]).clamp_(0.0, max_value)
    new_chroma = value * saturation
    low = value - new_chroma
    out = []
    for n in (5.0, 3.0, 1.0):  # R, G, B: each channel's weight falls off 1 sixth away from its peak
        distance = torch.remainder(sixths + n, 6.0).sub_(2.0).abs_().sub_(1.0).clamp_(0.0, 1.0)
        out.append(torch.addcmul(low, new_chroma, distance))
    return torch.stack(out, dim=1)


# ---------------------------------------------------------------- flip


def flip_images(images: Tensor, flip: Tensor) -> Tensor:
    """Mirror the images whose ``flip`` (``bool [B]``) is set, left-right."""
    return torch.where(flip.to(images.device).view(-1, 1, 1, 1), images.flip(-1), images)


def flip_boxes(boxes: Tensor, flip: Tensor, width: float) -> Tensor:
    """Mirror xyxy boxes ``[M, 4]`` whose ``flip`` (``bool [M]``) is set, in an image ``width`` wide."""
    mirrored = torch.stack((width - boxes[:, 2], boxes[:, 1], width - boxes[:, 0], boxes[:, 3]), dim=1)
    return torch.where(flip[:, None], mirrored, boxes)


# ---------------------------------------------------------------- composition


def augment_boxes(labels: Tensor, offsets: Tensor, hw: Tensor, canvas: int, matrix: Tensor,
                  scale: Tensor, flip: Tensor, imgsz: int) -> Tensor:
    """A batch's labels through placement, warp, filter and flip: the box half of augmentation.

    Args:
        labels: ``[M, 7]`` rows (sample, tile, class, cx, cy, w, h), box normalized to the tile.
        offsets: ``int64 [B, K, 2]`` tile positions on the canvas.
        hw: ``int64 [B, K, 2]`` tile sizes ``(h, w)``.
        canvas: side of the canvas (``2S`` mosaic, ``S`` letterbox).
        matrix: ``float64 [B, 2, 3]`` each sample's affine map.
        scale: ``float64 [B]`` each sample's affine scale.
        flip: ``bool [B]`` each sample's flip.
        imgsz: output side ``S``.

    Returns:
        ``float32 [M', 6]`` targets (sample, class, cx, cy, w, h), box normalized to ``S``.
    """
    placed = place_boxes(labels, offsets, hw, canvas)
    sample = labels[:, 0].long()
    warped = transform_boxes(placed, matrix.double()[sample], imgsz)
    keep = keep_boxes(placed, warped, scale.double()[sample])
    warped = flip_boxes(warped, flip[sample], float(imgsz))
    return to_targets(sample[keep], labels[keep, 2], warped[keep], imgsz)


def render_images(tiles: Tensor, offsets: Tensor, hw: Tensor, canvas: int, theta: Tensor,
                  hsv: Tensor, flip: Tensor, *, imgsz: int, has_hsv: bool = True,
                  has_flip: bool = True) -> Tensor:
    """A batch's pixels through placement, warp, HSV and flip: the image half of augmentation.

    Args:
        tiles: ``uint8 [B, K, S, S, 3]`` cached slots on the device that should do the work.
        offsets: ``int64 [B, K, 2]`` tile positions on the canvas, on the tiles' device (or the CPU).
        hw: ``int64 [B, K, 2]`` tile sizes, likewise.
        canvas: side of the canvas (``2S`` mosaic, ``S`` letterbox).
        theta: ``float32 [B, 2, 3]`` from :func:`grid_theta`.
        hsv: ``[B, 3]`` HSV gains.
        flip: ``bool [B]``.
        imgsz: output side ``S``.
        has_hsv: False skips the colour step (every gain is the identity).
        has_flip: False skips the flip step (no image flips).

    Returns:
        ``float32 [B, 3, S, S]`` RGB in [0, 255].
    """
    images = warp_canvas(place_tiles(tiles, offsets, hw, canvas), theta, imgsz)
    if has_hsv:
        images = jitter_hsv(images, hsv)
    if has_flip:
        images = flip_images(images, flip)
    return images
