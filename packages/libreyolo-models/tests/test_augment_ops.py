"""Augmentation ops: each box transform agrees with what happens to the pixels."""

from __future__ import annotations

import colorsys

import numpy as np
import pytest
import torch

from libreyolo_models.data.augment_draws import affine_matrix
from libreyolo_models.data.augment_ops import (
    augment_boxes,
    flip_boxes,
    flip_images,
    grid_theta,
    jitter_hsv,
    keep_boxes,
    mosaic,
    mosaic_offsets,
    render_images,
    sampling_grid,
    transform_boxes,
    warp_canvas,
)
from libreyolo_models.data.letterbox import place_boxes, place_tiles


def _mask_box(mask: torch.Tensor) -> list[float]:
    ys, xs = torch.nonzero(mask, as_tuple=True)
    return [xs.min().item(), ys.min().item(), xs.max().item() + 1.0, ys.max().item() + 1.0]


def _matrix(canvas: int, out: int, **kw: float) -> torch.Tensor:
    params = dict(degrees=0.0, scale=1.0, shear_x=0.0, shear_y=0.0, translate_x=0.5, translate_y=0.5)
    params.update(kw)
    return torch.from_numpy(affine_matrix(canvas=canvas, out_size=out, **params))[None]


def test_mosaic_offsets_put_each_tile_against_the_centre() -> None:
    hw = torch.tensor([[[10, 20], [11, 21], [12, 22], [13, 23]]])
    off = mosaic_offsets(torch.tensor([[50, 40]]), hw)
    # top-left ends at the centre, top-right starts at x=50, bottom-left starts at y=40, ...
    assert off.tolist() == [[[30, 30], [50, 29], [28, 40], [50, 40]]]


def test_place_tiles_crops_at_the_canvas_edge_and_fills_the_rest_with_114() -> None:
    tiles = torch.arange(1, 1 + 6 * 6 * 3, dtype=torch.uint8).view(1, 1, 6, 6, 3)
    out = place_tiles(tiles, torch.tensor([[[-2, 5]]]), torch.tensor([[[4, 5]]]), canvas=8)
    assert out.shape == (1, 8, 8, 3)
    assert torch.equal(out[0, 5:8, 0:3], tiles[0, 0, 0:3, 2:5])  # rows 0..2, columns 2..4 visible
    assert (out[0, :5] == 114).all() and (out[0, 5:, 3:] == 114).all()


def test_mosaic_boxes_match_the_pixels_they_were_placed_with() -> None:
    size = 32
    rng = np.random.default_rng(1)
    tiles = torch.zeros(1, 4, size, size, 3, dtype=torch.uint8)
    hw = torch.tensor([[[32, 20], [25, 32], [32, 32], [18, 27]]])
    labels = []
    for k in range(4):
        h, w = hw[0, k].tolist()
        x1, y1 = int(rng.integers(0, w - 6)), int(rng.integers(0, h - 6))
        x2, y2 = int(rng.integers(x1 + 3, w + 1)), int(rng.integers(y1 + 3, h + 1))
        tiles[0, k, y1:y2, x1:x2, k % 3] = 40 + 50 * k
        labels.append([0, k, k, (x1 + x2) / 2 / w, (y1 + y2) / 2 / h, (x2 - x1) / w, (y2 - y1) / h])
    centre = torch.tensor([[30, 37]])
    canvas = mosaic(tiles, hw, centre)
    boxes = place_boxes(torch.tensor(labels, dtype=torch.float64), mosaic_offsets(centre, hw), hw, 2 * size)
    for k in range(4):
        mask = canvas[0, :, :, k % 3] == 40 + 50 * k
        if mask.any():
            assert boxes[k].tolist() == pytest.approx(_mask_box(mask), abs=1e-6)
        else:  # cropped off the canvas entirely: an empty box
            assert (boxes[k, 2] - boxes[k, 0]) * (boxes[k, 3] - boxes[k, 1]) == 0


@pytest.mark.parametrize("kw", [
    dict(degrees=30.0),
    dict(degrees=-17.0, scale=0.7, translate_x=0.55),
    dict(shear_x=10.0, shear_y=-6.0, scale=1.3),
    dict(degrees=45.0, shear_x=5.0, scale=0.9, translate_x=0.42, translate_y=0.6),
    dict(scale=1.6, translate_x=0.3),  # part of the box leaves the output: clipped
])
@pytest.mark.parametrize("canvas", [64, 128])
def test_affine_box_transform_matches_the_warped_mask(kw: dict[str, float], canvas: int) -> None:
    out = 64
    image = torch.zeros(1, canvas, canvas, 3, dtype=torch.uint8)
    x1, y1, x2, y2 = canvas // 2 - 12, canvas // 2 - 5, canvas // 2 + 9, canvas // 2 + 15
    image[0, y1:y2, x1:x2] = 255
    m = _matrix(canvas, out, **kw)
    warped = warp_canvas(image, grid_theta(m, canvas, out), out)
    box = transform_boxes(torch.tensor([[x1, y1, x2, y2]], dtype=torch.float64), m, out)[0]
    assert box.tolist() == pytest.approx(_mask_box(warped[0, 0] > 127.5), abs=2.0)


def test_sampling_grid_is_the_affine_grid_of_theta() -> None:
    theta = torch.tensor([[[0.9, 0.2, -0.1], [-0.3, 1.1, 0.05]], [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
    expected = torch.nn.functional.affine_grid(theta, [2, 3, 9, 9], align_corners=False)
    assert torch.allclose(sampling_grid(theta, 9), expected, atol=1e-6)


def test_identity_warp_reproduces_the_canvas() -> None:
    image = torch.randint(0, 256, (2, 16, 16, 3), dtype=torch.uint8)
    m = _matrix(16, 16).expand(2, 2, 3)
    warped = warp_canvas(image, grid_theta(m, 16, 16), 16)
    assert torch.allclose(warped, image.permute(0, 3, 1, 2).float(), atol=1e-3)


def test_warp_fills_114_where_the_source_is_off_the_canvas() -> None:
    image = torch.zeros(1, 16, 16, 3, dtype=torch.uint8)
    warped = warp_canvas(image, grid_theta(_matrix(16, 16, translate_x=1.2), 16, 16), 16)
    assert torch.allclose(warped[..., :4], torch.full_like(warped[..., :4], 114.0))  # left strip: off canvas
    assert torch.allclose(warped[..., 12:], torch.zeros_like(warped[..., 12:]))      # right: the canvas


def test_flip_mirrors_boxes_like_pixels() -> None:
    images = torch.zeros(2, 3, 10, 20)
    images[:, :, 2:6, 3:8] = 1.0
    flipped = flip_images(images, torch.tensor([True, False]))
    boxes = flip_boxes(torch.tensor([[3.0, 2, 8, 6]] * 2), torch.tensor([True, False]), 20.0)
    assert boxes[0].tolist() == _mask_box(flipped[0, 0] > 0.5)
    assert boxes[1].tolist() == _mask_box(flipped[1, 0] > 0.5) == [3.0, 2.0, 8.0, 6.0]


def test_keep_boxes_applies_side_area_and_aspect_rules() -> None:
    before = torch.tensor([[0.0, 0, 10, 10]] * 6, dtype=torch.float64)
    after = torch.tensor([
        [0.0, 0, 10, 10],    # unchanged: kept
        [0.0, 0, 1.9, 10],   # narrower than 2 px: dropped
        [0.0, 0, 2.0, 5],    # 2 px wide, 10 % of the area: kept
        [0.0, 0, 2.0, 4.9],  # under 10 % of the area: dropped
        [0.0, 0, 2.0, 40.2],  # aspect 20.1: dropped
        [0.0, 0, 3.0, 3.0],  # 9 % of the area scaled by 1, but the warp scaled by 0.5: 36 %, kept
    ], dtype=torch.float64)
    scale = torch.tensor([1.0, 1, 1, 1, 1, 0.5], dtype=torch.float64)
    assert keep_boxes(before, after, scale).tolist() == [True, False, True, False, False, True]


def test_jitter_hsv_matches_colorsys() -> None:
    images = torch.rand(2, 3, 4, 5) * 255
    images[0, :, 0, 0] = 0.0           # black
    images[0, :, 0, 1] = 77.0          # grey: no hue
    images[1, :, 1, 1] = torch.tensor([255.0, 0, 0])
    gains = torch.tensor([[0.1, 1.4, 0.8], [-0.3, 0.5, 1.5]])
    out = jitter_hsv(images, gains)
    for b in range(2):
        for y in range(4):
            for x in range(5):
                h, s, v = colorsys.rgb_to_hsv(*(images[b, :, y, x] / 255).tolist())
                h = (h + gains[b, 0].item()) % 1.0
                s = min(max(s * gains[b, 1].item(), 0.0), 1.0)
                v = min(max(v * gains[b, 2].item(), 0.0), 1.0)
                expected = [c * 255 for c in colorsys.hsv_to_rgb(h, s, v)]
                assert out[b, :, y, x].tolist() == pytest.approx(expected, abs=1e-2)


def test_jitter_hsv_with_identity_gains_keeps_the_image_and_a_third_turn_makes_red_green() -> None:
    images = torch.rand(1, 3, 8, 8) * 255
    assert torch.allclose(jitter_hsv(images, torch.tensor([[0.0, 1.0, 1.0]])), images, atol=1e-3)
    red = torch.tensor([200.0, 0.0, 0.0]).view(1, 3, 1, 1)
    green = jitter_hsv(red, torch.tensor([[1 / 3, 1.0, 1.0]]))
    assert green.flatten().tolist() == pytest.approx([0.0, 200.0, 0.0], abs=1e-3)


def test_augment_boxes_follow_the_rendered_pixels() -> None:
    """Mosaic + affine + flip on a whole batch: every kept target frames its object's pixels."""
    size, out = 32, 32
    tiles = torch.zeros(2, 4, size, size, 3, dtype=torch.uint8)
    hw = torch.tensor([[[32, 32], [32, 24], [20, 32], [32, 32]]] * 2)
    rects = [(18, 16, 29, 30), (1, 16, 12, 30), (18, 1, 29, 15)]  # x1, y1, x2, y2 near the centre corner
    labels = []
    for b in range(2):
        for k, (x1, y1, x2, y2) in enumerate(rects):  # tile k's object is the only thing with channel k lit
            tiles[b, k, y1:y2, x1:x2, k] = 255
            h, w = hw[b, k].tolist()
            labels.append([b, k, k, (x1 + x2) / 2 / w, (y1 + y2) / 2 / h, (x2 - x1) / w, (y2 - y1) / h])
    centre = torch.tensor([[33, 30], [28, 35]])
    offsets = mosaic_offsets(centre, hw)
    matrix = torch.cat([_matrix(2 * size, out, degrees=12.0, scale=1.2),
                        _matrix(2 * size, out, shear_x=8.0, scale=0.8, translate_x=0.45)])
    scale = torch.tensor([1.2, 0.8], dtype=torch.float64)
    flip = torch.tensor([False, True])
    targets = augment_boxes(torch.tensor(labels, dtype=torch.float64), offsets, hw, 2 * size, matrix,
                            scale, flip, out)
    images = render_images(tiles, offsets, hw, 2 * size, grid_theta(matrix, 2 * size, out),
                           torch.tensor([[0.0, 1.0, 1.0]] * 2), flip, imgsz=out, has_hsv=False)
    assert len(targets) >= 4
    kept = {(int(t[0]), int(t[1])) for t in targets.tolist()}
    for sample, cls, cx, cy, w, h in targets.tolist():
        mask = images[int(sample), int(cls)] > 127.5
        box = [(cx - w / 2) * out, (cy - h / 2) * out, (cx + w / 2) * out, (cy + h / 2) * out]
        assert box == pytest.approx(_mask_box(mask), abs=2.0)
    for b in range(2):
        for k, (x1, y1, x2, y2) in enumerate(rects):
            if (b, k) not in kept:  # dropped: little of the object is left in view
                visible = (images[b, k] > 127.5).sum().item()
                assert visible < 0.25 * (x2 - x1) * (y2 - y1) * scale[b].item() ** 2


def test_gathered_placement_equals_the_per_tile_copies_byte_for_byte() -> None:
    """The GPU's batched placement against the CPU's loop: crops at every edge, empty tiles,
    overlapping tiles (the later wins) and a real mosaic layout."""
    from libreyolo_models.data.augment_ops import mosaic_offsets
    from libreyolo_models.data.letterbox import place_tiles_gathered

    gen = torch.Generator().manual_seed(0)
    for _ in range(40):
        b, k, side = (int(torch.randint(lo, hi, (1,), generator=gen)) for lo, hi in ((1, 5), (1, 5), (2, 10)))
        canvas = int(torch.randint(2, 2 * side + 3, (1,), generator=gen))
        tiles = torch.randint(0, 256, (b, k, side, side, 3), generator=gen, dtype=torch.uint8)
        offsets = torch.randint(-side, canvas + 2, (b, k, 2), generator=gen)
        hw = torch.randint(0, side + 1, (b, k, 2), generator=gen)
        assert torch.equal(place_tiles_gathered(tiles, offsets, hw, canvas), place_tiles(tiles, offsets, hw, canvas))
    tiles = torch.randint(0, 256, (3, 4, 16, 16, 3), generator=gen, dtype=torch.uint8)
    hw = torch.randint(6, 17, (3, 4, 2), generator=gen)
    offsets = mosaic_offsets(torch.tensor([[12, 20], [16, 16], [25, 9]]), hw)
    assert torch.equal(place_tiles_gathered(tiles, offsets, hw, 32), place_tiles(tiles, offsets, hw, 32))


def test_scattered_placement_equals_the_per_tile_copies_byte_for_byte() -> None:
    """Tiles that do not overlap, as mosaic and letterbox place them: one tile cropped at any edge
    or empty, and real mosaic layouts with tiles hanging off the canvas; the result may be a view."""
    from libreyolo_models.data.augment_ops import mosaic_offsets
    from libreyolo_models.data.letterbox import place_tiles_scattered

    gen = torch.Generator().manual_seed(1)
    for _ in range(40):
        b, side = int(torch.randint(1, 5, (1,), generator=gen)), int(torch.randint(2, 10, (1,), generator=gen))
        canvas = int(torch.randint(2, 2 * side + 3, (1,), generator=gen))
        tiles = torch.randint(0, 256, (b, 1, side, side, 3), generator=gen, dtype=torch.uint8)
        offsets = torch.randint(-side, canvas + 2, (b, 1, 2), generator=gen)
        hw = torch.randint(0, side + 1, (b, 1, 2), generator=gen)
        assert torch.equal(place_tiles_scattered(tiles, offsets, hw, canvas), place_tiles(tiles, offsets, hw, canvas))
    for _ in range(20):
        tiles = torch.randint(0, 256, (3, 4, 16, 16, 3), generator=gen, dtype=torch.uint8)
        hw = torch.randint(0, 17, (3, 4, 2), generator=gen)
        centre = torch.randint(0, 33, (3, 2), generator=gen)
        offsets = mosaic_offsets(centre, hw)
        assert torch.equal(place_tiles_scattered(tiles, offsets, hw, 32), place_tiles(tiles, offsets, hw, 32))
