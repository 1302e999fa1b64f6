"""Predict's pinned batch buffers: same-size frames share one reused pinned buffer, written
again only after the upload from it has run; mixed sizes are pinned one by one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from libreyolo_models.predict.staging import PinnedStaging

pytestmark = pytest.mark.cuda


def _frames(n: int, h: int = 6, w: int = 8, base: int = 0) -> list[np.ndarray]:
    return [np.full((h, w, 3), base + i, np.uint8) for i in range(n)]


def test_same_size_frames_share_a_reused_pinned_buffer() -> None:
    staging = PinnedStaging(capacity=2)
    stream = torch.cuda.current_stream()
    pixels, slot = staging.stage(_frames(3))
    assert slot is not None and all(p.is_pinned() for p in pixels)
    assert [int(p[0, 0, 0]) for p in pixels] == [0, 1, 2]
    uploaded = [p.to("cuda", non_blocking=True) for p in pixels]
    staging.release(slot, stream)
    again, slot2 = staging.stage(_frames(3, base=10))  # waits for the upload above, then reuses
    assert slot2 is slot and again[0].data_ptr() == pixels[0].data_ptr()
    assert [int(u[0, 0, 0]) for u in uploaded] == [0, 1, 2]  # the first upload read the old pixels
    assert [int(p[0, 0, 0]) for p in again] == [10, 11, 12]
    other, slot3 = staging.stage(_frames(3, h=4))  # another size: a buffer of its own
    assert slot3 is not None and slot3 is not slot and other[0].shape == (4, 8, 3)


def test_mixed_sizes_are_pinned_one_by_one_and_the_ring_stays_bounded() -> None:
    staging = PinnedStaging(capacity=1)
    pixels, slot = staging.stage([*_frames(1), *_frames(1, h=4)])
    assert slot is None and all(p.is_pinned() for p in pixels) and pixels[1].shape == (4, 8, 3)
    stream = torch.cuda.current_stream()
    for h in (2, 3, 4):
        _, s = staging.stage(_frames(2, h=h))
        assert s is not None
        staging.release(s, stream)
    assert len(staging._idle) == 1  # the capacity, whatever the sizes seen
