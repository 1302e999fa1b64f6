"""Predict reads a large JPEG at a reduced DCT scale, on the CPU straight to its letterbox size (the
network sees validation's cached pixels bit for bit), on CUDA left at the DCT scale's size for the
device letterbox to resize (within a grey level of them); boxes map back to the full picture, and
``Results.orig_img`` is the full picture, decoded only when something looks at it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from libreyolo_models import LibreYOLO9
from libreyolo_models.data import pil_memory
from libreyolo_models.data.decode import read_image_file
from libreyolo_models.data.image_cache import decode_image
from libreyolo_models.data.image_files import read_image_for
from libreyolo_models.data.letterbox import letterbox_offsets, place_tiles, to_network_input
from libreyolo_models.data.letterbox_images import letterbox_batch
from libreyolo_models.predict.streams import open_source

IMGSZ = 64


def _photo(h: int, w: int, seed: int = 0) -> np.ndarray:
    """Smooth gradients and a few blocks: JPEG-like content whose reduced decode is not trivial."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    img = np.stack([xx * 255 // w, yy * 255 // h, (xx + yy) * 127 // (h + w)], -1).astype(np.uint8)
    for _ in range(4):
        y, x = int(rng.integers(0, h - 20)), int(rng.integers(0, w - 20))
        img[y:y + 20, x:x + 30] = rng.integers(0, 255, 3)
    return img


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("reduced")
    out = {"big": root / "big.jpg", "small": root / "small.jpg", "png": root / "big.png",
           "rotated": root / "rotated.jpg"}
    Image.fromarray(_photo(180, 320)).save(out["big"], quality=90)        # 5x the letterbox: reduced
    Image.fromarray(_photo(40, 60)).save(out["small"], quality=90)        # smaller: full size
    Image.fromarray(_photo(180, 320)).save(out["png"])                    # not a JPEG: full size
    exif = Image.Exif()
    exif[0x0112] = 6  # shown rotated by 90 degrees
    Image.fromarray(_photo(180, 320, 1)).save(out["rotated"], quality=90, exif=exif)
    return out


def test_a_large_jpeg_decodes_reduced_to_the_image_caches_pixels_and_keeps_its_full_picture(
        files: dict[str, Path]) -> None:
    for key in ("big", "rotated"):
        shrunk = read_image_for(files[key], IMGSZ)
        cached, orig = decode_image(files[key], IMGSZ)
        assert shrunk.data is not None and shrunk.orig_shape == orig
        assert np.array_equal(shrunk.pixels, cached)                  # validation's pixels, bit for bit
        assert np.array_equal(shrunk.full(), read_image_file(files[key])[0])  # the picture as a viewer shows it
    assert read_image_for(files["rotated"], IMGSZ).orig_shape == (320, 180)


def test_small_images_and_other_formats_decode_at_full_size(files: dict[str, Path]) -> None:
    for key in ("small", "png"):
        shrunk = read_image_for(files[key], IMGSZ)
        assert shrunk.data is None and np.array_equal(shrunk.pixels, read_image_file(files[key])[0])


def test_predict_feeds_the_network_validations_canvas_bit_for_bit(files: dict[str, Path]) -> None:
    (frame,) = list(open_source(str(files["big"]), shrink_to=IMGSZ).frames)
    assert frame.full is not None and frame.orig_shape == (180, 320)
    x, (info,) = letterbox_batch([torch.from_numpy(frame.image.copy())], IMGSZ,
                                 orig_shapes=[frame.orig_shape])
    assert info.orig_shape == (180, 320) and info.ratio == pytest.approx(IMGSZ / 320)
    assert torch.equal(x, _validation_canvas(files["big"]))


def _validation_canvas(path: Path) -> torch.Tensor:
    cached, _ = decode_image(path, IMGSZ)
    h, w = cached.shape[:2]
    tile = torch.zeros(1, 1, IMGSZ, IMGSZ, 3, dtype=torch.uint8)
    tile[0, 0, :h, :w] = torch.from_numpy(cached.copy())
    hw = torch.tensor([[[h, w]]])
    return to_network_input(place_tiles(tile, letterbox_offsets(hw, IMGSZ), hw, IMGSZ).permute(0, 3, 1, 2))


def test_left_for_the_device_the_reduced_decode_keeps_its_dct_size_and_letterboxes_within_a_grey_level(
        files: dict[str, Path]) -> None:
    """Predict on CUDA skips PIL's resize of the reduced decode (``resize_on_host=False``): the frame
    is the DCT scale's size, between the letterbox size and the full picture, and the letterbox's
    antialiased resize of it lands within one grey level of validation's canvas."""
    for key in ("big", "rotated"):
        shrunk = read_image_for(files[key], IMGSZ, resize=False)
        cached, orig = decode_image(files[key], IMGSZ)
        assert shrunk.orig_shape == orig and shrunk.data is not None
        assert cached.shape[0] <= shrunk.pixels.shape[0] < orig[0] and cached.shape[1] <= shrunk.pixels.shape[1] < orig[1]
        assert np.array_equal(shrunk.full(), read_image_file(files[key])[0])
        # PIL's memory as it holds it (RGB and a padding byte), where the installed Pillow can hand it over
        assert shrunk.pixels.shape[2] == (4 if pil_memory._exports_safely() else 3)
    (frame,) = list(open_source(str(files["big"]), shrink_to=IMGSZ, resize_on_host=False).frames)
    assert frame.image.shape[:2] == read_image_for(files["big"], IMGSZ, resize=False).pixels.shape[:2] != (36, 64)
    x, (info,) = letterbox_batch([torch.from_numpy(frame.image[..., :3].copy())], IMGSZ, orig_shapes=[frame.orig_shape])
    assert info.orig_shape == (180, 320) and info.ratio == pytest.approx(IMGSZ / 320)
    assert float((x - _validation_canvas(files["big"])).abs().max()) * 255 <= 1.0 + 1e-4
    # small files and other formats are unaffected: full size either way
    assert np.array_equal(read_image_for(files["png"], IMGSZ, resize=False).pixels, read_image_file(files["png"])[0])


def test_results_carry_the_full_picture_decoded_on_first_look(files: dict[str, Path], tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = LibreYOLO9(size="t", nc=3, imgsz=IMGSZ)
    (res,) = model(str(files["big"]), conf=0.0, max_det=3, verbose=False)
    assert "orig_img" not in vars(res)                     # not decoded yet
    copy = res.numpy()                                     # conversions keep it deferred
    assert "orig_img" not in vars(copy) and "orig_img" not in vars(res.cpu())
    assert np.array_equal(copy.orig_img, read_image_file(files["big"])[0])
    assert res.orig_shape == (180, 320) and res.boxes is not None and res.boxes.orig_shape == (180, 320)
    assert len(res.boxes) == 3 and float(res.boxes.xyxy[:, 2].max()) <= 320  # boxes in the picture's pixels
    assert np.array_equal(res.orig_img, read_image_file(files["big"])[0]) and "orig_img" in vars(res)
    assert res.plot().shape == (180, 320, 3)
    (saved,) = model(str(files["big"]), conf=0.0, max_det=3, save=True, project=str(tmp_path), name="run",
                     verbose=False)
    assert Image.open(next((tmp_path / "run").glob("*.jpg"))).size == (320, 180)
    # The same picture given as pixels (no reduced decode) finds boxes in the same frame of reference.
    (direct,) = model(read_image_file(files["big"])[0], conf=0.0, max_det=3, verbose=False)
    assert direct.orig_shape == saved.orig_shape == (180, 320)


@pytest.mark.cuda
def test_on_cuda_predict_leaves_the_resize_to_the_device_within_a_grey_level_or_two(
        files: dict[str, Path], open_source_calls: list[dict[str, object]]) -> None:
    """Predict on CUDA asks its source for the DCT-scale decode (``resize_on_host=False``), and the
    device letterbox of it stays close to validation's canvas (PIL's resize on the CPU)."""
    torch.manual_seed(0)
    model = LibreYOLO9(size="t", nc=3, imgsz=IMGSZ)
    (res,) = model(str(files["big"]), conf=0.0, max_det=3, device=0, verbose=False)
    assert [call.get("resize_on_host") for call in open_source_calls] == [False] and res.orig_shape == (180, 320)
    assert np.array_equal(res.orig_img, read_image_file(files["big"])[0])
    (frame,) = list(open_source(str(files["big"]), shrink_to=IMGSZ, resize_on_host=False).frames)
    x, _ = letterbox_batch([torch.from_numpy(frame.image[..., :3].copy()).cuda()], IMGSZ, orig_shapes=[frame.orig_shape])
    diff = (x.cpu() - _validation_canvas(files["big"])).abs() * 255
    assert float(diff.max()) <= 2.0 + 1e-4 and float(diff.mean()) < 0.5
