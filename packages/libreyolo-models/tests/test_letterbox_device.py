"""Predict's device letterbox: equal to the CPU reference and to validation's pixels within a grey level."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from libreyolo_models.data import letterbox_images as letterbox_module
from libreyolo_models.data.letterbox import letterbox_offsets, place_tiles, to_network_input
from libreyolo_models.data.letterbox_images import letterbox, letterbox_batch, letterbox_pixels

SIZES = [(90, 120), (480, 640), (37, 300), (64, 64), (20, 10), (128, 127)]
ONE_LEVEL = 1 / 255 + 1e-6


def _images(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in SIZES]


def _check_against_reference(device: torch.device) -> None:
    images = _images()
    x, infos = letterbox_batch([torch.from_numpy(im).to(device) for im in images], 128)
    assert x.shape == (len(images), 3, 128, 128) and x.dtype == torch.float32 and x.device.type == device.type
    for i, image in enumerate(images):
        ref, info = letterbox(image, 128)
        assert infos[i] == info
        assert (x[i].cpu() - ref).abs().max().item() <= ONE_LEVEL, SIZES[i]


def test_device_path_equals_the_cpu_reference_within_one_grey_level() -> None:
    _check_against_reference(torch.device("cpu"))


@pytest.mark.cuda
def test_gpu_letterbox_equals_the_cpu_reference_within_one_grey_level() -> None:
    _check_against_reference(torch.device("cuda", 0))


def test_predict_pixels_match_validations_cached_pixels_within_one_grey_level() -> None:
    """Validation pastes PIL-resized cache tiles; predict resizes on the device: same canvas."""
    for image in _images(1):
        x, (info,) = letterbox_batch([torch.from_numpy(image)], 128)
        h, w = image.shape[:2]
        new_h, new_w = round(h * info.ratio), round(w * info.ratio)
        tile = torch.zeros(1, 1, 128, 128, 3, dtype=torch.uint8)
        tile[0, 0, :new_h, :new_w] = torch.from_numpy(
            np.array(Image.fromarray(image).resize((new_w, new_h), Image.Resampling.BILINEAR)))
        hw = torch.tensor([[[new_h, new_w]]])
        val = to_network_input(place_tiles(tile, letterbox_offsets(hw, 128), hw, 128).permute(0, 3, 1, 2))
        assert (x - val).abs().max().item() <= ONE_LEVEL


def test_same_sized_frames_and_mixed_sizes_give_the_same_pixels_as_one_by_one() -> None:
    first, second, third = (torch.from_numpy(im) for im in _images(2)[:3])
    for images in ([first, second, third] * 2, [first, first, second, third, third, third]):  # scattered, runs
        batched, _ = letterbox_batch(images, 96)
        singles = torch.cat([letterbox_batch([im], 96)[0] for im in images])
        assert torch.equal(batched, singles)


def test_half_input_is_the_float32_result_cast_once() -> None:
    image = torch.from_numpy(_images(3)[1])
    full, _ = letterbox_batch([image], 64)
    half, _ = letterbox_batch([image], 64, torch.float16)
    assert half.dtype == torch.float16 and torch.equal(half, full.half())


def test_resizing_a_few_frames_per_call_gives_the_pixels_of_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """Frames resize in chunks to bound the float32 copy; any chunking yields the same canvas,
    in uint8 (predict scales it inside the network call)."""
    frame = torch.from_numpy(_images(4)[1])  # 480x640
    other = torch.from_numpy(_images(4)[0])
    images = [frame, frame.flip(0), other, frame.flip(1), frame]  # a run, an interruption, a scattered one
    whole, infos = letterbox_pixels(images, 96)
    monkeypatch.setattr(letterbox_module, "RESIZE_CHUNK_BYTES", 480 * 640 * 3 * 4 * 2)  # two frames per call
    pairs, _ = letterbox_pixels(images, 96)
    monkeypatch.setattr(letterbox_module, "RESIZE_CHUNK_BYTES", 1)  # one per call
    singles, _ = letterbox_pixels(images, 96)
    assert whole.dtype == torch.uint8 and whole.shape == (5, 3, 96, 96)
    assert torch.equal(whole, pairs) and torch.equal(whole, singles)
    assert torch.equal(letterbox_batch(images, 96)[0], to_network_input(whole)) and len(infos) == 5
