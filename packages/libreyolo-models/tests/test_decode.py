"""The input contract: every file mode and bit depth, every array and tensor layout and dtype,
decodes to the 8-bit RGB a viewer shows, by one decoder, in the dataset check, the image cache
and predict alike."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from libreyolo_models import SourceError
from libreyolo_models.data.decode import (
    FLOAT_0_255_NOTE,
    ImageDecodeError,
    Notes,
    array_to_rgb8,
    read_image_file,
    tensor_to_rgb8,
)
from libreyolo_models.data.image_cache import decode_image, open_image_cache
from libreyolo_models.data.image_check import check_image
from libreyolo_models.predict.sources import iter_sources

RAMP = np.tile(np.arange(0, 256, 8, dtype=np.uint8), (8, 1))  # 8 x 32 grey ramp 0..248


@pytest.fixture(autouse=True)
def _private_cache_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "shm").mkdir()
    monkeypatch.setenv("LIBREYOLO_SHM_DIR", str(tmp_path / "shm"))


def _grey(rgb: np.ndarray) -> np.ndarray:
    assert rgb.dtype == np.uint8 and rgb.ndim == 3 and rgb.shape[2] == 3
    assert (rgb[..., 0] == rgb[..., 1]).all() and (rgb[..., 1] == rgb[..., 2]).all()
    return rgb[..., 0]


# --------------------------------------------------------------------------- files


def _save(tmp_path: Path, name: str, im: Image.Image, **kw: object) -> Path:
    path = tmp_path / name
    im.save(path, **kw)
    return path


@pytest.mark.parametrize("name", ["g16.png", "g16.tif"])
def test_16_bit_grey_is_scaled_to_8_bits_not_clipped_to_white(tmp_path: Path, name: str) -> None:
    path = _save(tmp_path, name, Image.fromarray(RAMP.astype(np.uint16) * 257))  # I;16, full range
    rgb, size = read_image_file(path)
    assert size == (8, 32)
    np.testing.assert_array_equal(_grey(rgb), RAMP)  # v * 257 -> v: exactly what a viewer shows


def test_16_bit_pil_image_of_a_uint16_array_is_scaled_too() -> None:
    pil = Image.fromarray(RAMP.astype(np.uint16) * 257)
    assert pil.mode == "I;16"
    (item,) = list(iter_sources(pil))
    np.testing.assert_array_equal(_grey(item.image), RAMP)


def test_32_bit_integer_image_is_read_as_16_bit(tmp_path: Path) -> None:
    path = _save(tmp_path, "i32.tif", Image.fromarray(RAMP.astype(np.int32) * 257))
    np.testing.assert_array_equal(_grey(read_image_file(path)[0]), RAMP)


def test_float_tiff_follows_the_float_rule(tmp_path: Path) -> None:
    path = _save(tmp_path, "f.tif", Image.fromarray(RAMP.astype(np.float32) / 255))
    np.testing.assert_array_equal(_grey(read_image_file(path)[0]), RAMP)


@pytest.mark.parametrize(("mode", "suffix"), [("L", ".png"), ("1", ".png"), ("P", ".png"), ("CMYK", ".jpg"),
                                              ("RGB", ".jpg"), ("L", ".jpg"), ("RGB", ".bmp"), ("RGB", ".webp")])
def test_every_mode_becomes_rgb_uint8(tmp_path: Path, mode: str, suffix: str) -> None:
    base = Image.fromarray(np.stack([RAMP, RAMP[::-1], np.full_like(RAMP, 90)], -1))
    im = base.convert(mode)
    rgb, size = read_image_file(_save(tmp_path, f"m{suffix}", im, **({"quality": 95} if suffix == ".jpg" else {})))
    assert rgb.dtype == np.uint8 and rgb.shape == (8, 32, 3) and size == (8, 32)
    expected = np.asarray(im.convert("RGB"), dtype=np.int16)
    assert np.abs(rgb.astype(np.int16) - expected).max() <= (40 if suffix in (".jpg", ".webp") else 0)


def test_transparency_is_composited_over_white(tmp_path: Path) -> None:
    rgba = np.zeros((4, 4, 4), np.uint8)
    rgba[..., 0] = 200  # red under...
    rgba[:, :2, 3] = 0  # ...fully transparent on the left: white there
    rgba[:, 2:, 3] = 255  # opaque on the right: the colour itself
    rgb, _ = read_image_file(_save(tmp_path, "a.png", Image.fromarray(rgba, "RGBA")))
    assert (rgb[:, :2] == 255).all() and rgb[0, 3].tolist() == [200, 0, 0]
    la = Image.fromarray(np.stack([np.full((4, 4), 0, np.uint8), np.full((4, 4), 128, np.uint8)], -1), "LA")
    assert read_image_file(_save(tmp_path, "la.png", la))[0][0, 0].tolist() == [127, 127, 127]
    palette = Image.new("P", (4, 4), 1)
    palette.putpalette([0, 0, 0, 10, 20, 30] + [0] * 762)
    palette.info["transparency"] = 1
    assert (read_image_file(_save(tmp_path, "p.png", palette, transparency=1))[0] == 255).all()


def test_exif_rotation_is_applied_everywhere(tmp_path: Path) -> None:
    pixels = np.zeros((40, 80, 3), np.uint8)
    pixels[:, :20] = 255  # a white band on the left of the stored image
    exif = Image.Exif()
    exif[0x0112] = 6  # displayed rotated 90 degrees clockwise: the band ends up on top
    path = _save(tmp_path, "r.jpg", Image.fromarray(pixels), exif=exif, quality=95)
    rgb, size = read_image_file(path)
    assert size == (80, 40) and rgb.shape == (80, 40, 3) and rgb[:16].mean() > 200 and rgb[24:].mean() < 50
    assert check_image(path).size == (80, 40)
    (item,) = list(iter_sources(Image.open(path)))
    assert item.image.shape == (80, 40, 3)


def test_training_cache_and_predict_see_the_same_pixels(tmp_path: Path) -> None:
    path = _save(tmp_path, "g16.png", Image.fromarray(RAMP.astype(np.uint16) * 257))
    cache = open_image_cache([path], 32)  # long side 32: no resize
    (item,) = list(iter_sources(path))
    np.testing.assert_array_equal(cache.read(0), item.image)
    np.testing.assert_array_equal(decode_image(path, 32)[0], item.image)
    assert check_image(path).error is None


def test_a_video_is_an_unsupported_source_not_a_corrupt_image(tmp_path: Path) -> None:
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(b"\x00\x00\x00\x18ftypmp42")
    with pytest.raises(ImageDecodeError, match=r"clip.mp4: unsupported source: .mp4 is a video"):
        read_image_file(clip)


# --------------------------------------------------------------------------- arrays and tensors

UINT8 = np.random.default_rng(0).integers(0, 256, (6, 5, 3), dtype=np.uint8)


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.int32, np.int64, np.uint32, np.float16, np.float32,
                                   np.float64, np.uint16])
@pytest.mark.parametrize("layout", ["HW", "HW1", "HW3", "HW4"])
def test_every_array_dtype_and_layout_decodes_by_the_rule(dtype: type, layout: str) -> None:
    values = UINT8.astype(np.float64)
    if np.issubdtype(dtype, np.floating):
        values = values / 255  # floats in [0, 1]
    elif dtype is np.uint16:
        values = values * 257  # 16-bit full range
    pixels = values.astype(dtype)
    expected = UINT8
    if layout == "HW":
        pixels, expected = pixels[..., 0], np.repeat(UINT8[..., :1], 3, axis=2)
    elif layout == "HW1":
        pixels, expected = pixels[..., :1], np.repeat(UINT8[..., :1], 3, axis=2)
    elif layout == "HW4":
        opaque = np.full((6, 5, 1), 1.0 if np.issubdtype(dtype, np.floating) else (65535 if dtype is np.uint16 else 255))
        pixels = np.concatenate([pixels, opaque.astype(dtype)], axis=2)
    out = array_to_rgb8(pixels, "a")
    tolerance = 1 if dtype is np.float16 else 0  # half precision rounds 1/255 steps
    assert out.dtype == np.uint8 and out.shape == (6, 5, 3)
    assert np.abs(out.astype(int) - expected.astype(int)).max() <= tolerance


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float16, torch.bfloat16, torch.float32, torch.float64,
                                   torch.int32, torch.int64])
@pytest.mark.parametrize("layout", ["HW", "CHW", "1HW", "BCHW", "4HW"])
def test_every_tensor_dtype_and_layout_decodes_by_the_rule(dtype: torch.dtype, layout: str) -> None:
    chw = torch.from_numpy(UINT8).permute(2, 0, 1).to(torch.float64)
    if dtype.is_floating_point:
        chw = chw / 255
    t = {"HW": chw[0], "CHW": chw, "1HW": chw[:1], "BCHW": torch.stack([chw, chw]),
         "4HW": torch.cat([chw, torch.full_like(chw[:1], 1.0 if dtype.is_floating_point else 255)])}[layout].to(dtype)
    images = tensor_to_rgb8(t, "t")
    assert len(images) == (2 if layout == "BCHW" else 1)
    expected = np.repeat(UINT8[..., :1], 3, axis=2) if layout in ("HW", "1HW") else UINT8
    tolerance = 2 if dtype in (torch.float16, torch.bfloat16) else 0
    for image in images:
        assert image.dtype == np.uint8 and image.shape == (6, 5, 3)
        assert np.abs(image.astype(int) - expected.astype(int)).max() <= tolerance


def test_float_beyond_one_is_read_as_0_255_with_one_warning_per_call(caplog: pytest.LogCaptureFixture) -> None:
    float255 = UINT8.astype(np.float32)
    with caplog.at_level(logging.WARNING):
        items = list(iter_sources([float255, float255, torch.from_numpy(float255).permute(2, 0, 1)]))
    assert all(np.array_equal(i.image, UINT8) for i in items)
    warnings = [r.getMessage() for r in caplog.records if FLOAT_0_255_NOTE in r.getMessage()]
    assert warnings == [f"source[0]: {FLOAT_0_255_NOTE}"]


@pytest.mark.parametrize(("value", "match"), [
    (np.zeros((3, 6, 5), np.uint8), r"shape \(3, 6, 5\), which looks channels-first.*transpose\(1, 2, 0\)"),
    (np.zeros((6, 5, 2), np.uint8), "has 2 channels"),
    (np.zeros((0, 5, 3), np.uint8), "no pixels"),
    (np.zeros((6, 5), bool), "boolean"),
    (np.full((6, 5), 300, np.int32), r"int32 image holds values 300..300; integer images other than uint16"),
    (np.full((6, 5), -2, np.int16), r"values -2..-2"),
    (np.full((6, 5), -0.5, np.float32), r"negative values \(min -0.5\).*undo any normalisation"),
    (np.full((6, 5), 1000.0), "values reach 1000: neither"),
    (np.full((6, 5), np.nan), "NaN or infinite"),
    (torch.zeros(6, 5, 3), r"shape \(6, 5, 3\), which looks channels-last.*permute\(2, 0, 1\)"),
    (torch.zeros(2, 6, 5, 3), r"permute\(0, 3, 1, 2\)"),
    (torch.zeros(3, 6, 5, dtype=torch.bool), "boolean"),
    (torch.zeros(2, 3), r"shape \(2, 3\)"),  # 2-D is grey HxW: fine; checked below
])
def test_inputs_outside_the_rule_are_errors_that_name_the_fix(value: object, match: str) -> None:
    if isinstance(value, torch.Tensor) and value.dim() == 2:
        assert tensor_to_rgb8(value, "t")[0].shape == (2, 3, 3)  # grey, not an error
        return
    with pytest.raises(SourceError, match=match):
        list(iter_sources(value))


def test_notes_log_each_note_once() -> None:
    notes = Notes()
    notes.add("x", "a")
    notes.add("x", "b")
    assert notes.seen == {"x": "a"}
