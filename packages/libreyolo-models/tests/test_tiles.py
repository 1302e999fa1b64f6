"""``layers.tiles``: overlapping tiles cover the picture, blend back to the plain result, and an
input that fits in one tile is the plain call itself."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from libreyolo_models.layers.tiles import tile_starts, tiled_apply


def test_tile_starts_step_by_tile_minus_overlap_and_end_flush() -> None:
    assert tile_starts(100, 128, 16) == [0]
    assert tile_starts(128, 128, 16) == [0]
    assert tile_starts(300, 128, 16) == [0, 112, 172]  # the last tile ends at 300
    with pytest.raises(ValueError, match="overlap"):
        tile_starts(300, 128, 128)


def test_an_input_that_fits_is_the_plain_call_bit_for_bit() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten())  # global: tiling would show
    conv = nn.Conv2d(3, 3, 3, padding=1)
    x = torch.rand(2, 3, 64, 48)
    assert torch.equal(tiled_apply(conv, x, 64, 8), conv(x))
    assert torch.equal(tiled_apply(lambda t: net(t)[:, :, None, None].expand(-1, -1, *t.shape[-2:]), x, 64, 8),
                       net(x)[:, :, None, None].expand(-1, -1, 64, 48))


@pytest.mark.parametrize(("h", "w", "tile", "overlap"), [(100, 70, 32, 8), (65, 200, 64, 16), (40, 40, 16, 4)])
def test_a_pointwise_network_tiled_equals_the_whole_picture(h: int, w: int, tile: int, overlap: int) -> None:
    """Every pixel is covered with positive weight and the blend divides them out again."""
    x = torch.rand(2, 3, h, w)
    calls = []

    def pointwise(t: torch.Tensor) -> torch.Tensor:
        calls.append(tuple(t.shape))
        return torch.cat((t * 2 - 1, t.sum(1, keepdim=True)), dim=1)  # another channel count, too

    out = tiled_apply(pointwise, x, tile, overlap, tiles_per_call=3)
    torch.testing.assert_close(out, pointwise(x), rtol=1e-6, atol=1e-6)
    assert all(c[-2] <= tile and c[-1] <= tile and c[0] % 2 == 0 for c in calls[:-1])  # tiles of the whole batch


def test_overlapping_ramps_hide_the_seams_that_butted_tiles_show() -> None:
    """A 3x3 conv sees zero padding at a tile's inner edge: butted tiles (no overlap) carry that
    error into the picture; with an overlap the ramp gives those edge pixels little weight."""
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 4, 3, padding=1)
    x = torch.rand(1, 3, 90, 70)
    with torch.no_grad():
        whole = conv(x)
        butted = (tiled_apply(conv, x, 32, 0) - whole).abs()
        ramped = (tiled_apply(conv, x, 32, 8) - whole).abs()
    assert ramped.max() < 0.5 * butted.max()
    assert ramped.mean() < 0.2 * butted.mean()
