"""The fast JPEG decode (torchvision's libjpeg-turbo) gives PIL's pixels exactly, and every file it
does not take (grey, CMYK, rotated by EXIF, truncated, reduced decode) still goes through PIL."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from libreyolo_models import SAMPLE_IMAGE
from libreyolo_models.data import decode, plain_jpeg
from libreyolo_models.data.decode import ImageDecodeError, read_image_file


def photo(h: int = 333, w: int = 517) -> Image.Image:
    """A photograph-like picture: the bundled sample resized, with fine noise (busy DCT blocks)."""
    base = np.asarray(Image.open(SAMPLE_IMAGE).convert("RGB").resize((w, h)), dtype=np.int16)
    noise = np.random.default_rng(0).integers(-20, 21, base.shape)
    return Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8))


def pil_pixels(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Records, per call of the fast decoder, whether it returned pixels."""
    calls: list[bool] = []
    real = plain_jpeg.decode_plain_jpeg

    def counted(raw: bytes) -> np.ndarray | None:
        out = real(raw)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(decode, "decode_plain_jpeg", counted)
    return calls


@pytest.mark.parametrize("options", [{"subsampling": 0}, {"subsampling": 1}, {"subsampling": 2},
                                     {"progressive": True}, {"optimize": True, "quality": 95},
                                     {"quality": 60, "restart_marker_blocks": 4}],
                         ids=["444", "422", "420", "progressive", "optimized", "restart-markers"])
def test_fast_decode_gives_pils_pixels(options: dict, tmp_path: Path, spy: list[bool]) -> None:
    if plain_jpeg.cpu_operator() is None:
        pytest.skip("torchvision's JPEG decoder is not available here: PIL decodes everything")
    path = tmp_path / "p.jpg"
    photo().save(path, "JPEG", **{"quality": 90, **options})
    pixels, size = read_image_file(path)
    assert spy == [True] and size == (333, 517)
    assert pixels.flags["C_CONTIGUOUS"] and pixels.dtype == np.uint8
    np.testing.assert_array_equal(pixels, pil_pixels(path))
    resized, _ = read_image_file(path, max_side=400)  # no reduced DCT scale for 517 -> 400: fast, then resized
    with Image.open(path) as im:
        expected = np.asarray(im.convert("RGB").resize((400, 258), Image.Resampling.BILINEAR))
    np.testing.assert_array_equal(resized, expected)


def test_files_it_does_not_take_go_through_pil(tmp_path: Path, spy: list[bool]) -> None:
    grey, cmyk, rotated = tmp_path / "grey.jpg", tmp_path / "cmyk.jpg", tmp_path / "rotated.jpg"
    photo().convert("L").save(grey, "JPEG")
    photo().convert("CMYK").save(cmyk, "JPEG")
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise on display
    photo().save(rotated, "JPEG", exif=exif)
    assert read_image_file(grey)[0].shape == (333, 517, 3)
    assert read_image_file(cmyk)[0].shape == (333, 517, 3)
    assert read_image_file(rotated)[1] == (517, 333)  # shown upright: width and height swap
    large = tmp_path / "large.jpg"
    photo(1080, 1920).save(large, "JPEG")
    assert read_image_file(large, max_side=640, draft_only=True)[0].shape == (360, 640, 3)  # reduced DCT decode
    assert spy == []  # none of them reached the fast decoder


def test_a_truncated_jpeg_is_still_reported(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    photo().save(buffer, "JPEG", quality=90)
    path = tmp_path / "cut.jpg"
    path.write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])
    assert plain_jpeg.decode_plain_jpeg(path.read_bytes()) is None
    with pytest.raises(ImageDecodeError, match="cut short|truncated"):
        read_image_file(path)


def test_the_decoder_loads_without_importing_torchvision() -> None:
    """Importing torchvision imports torch._dynamo (seconds of CPU); the decoder's library alone
    does not (test_import_cost checks a whole CPU training run)."""
    import subprocess
    import sys

    code = ("import sys, numpy; from libreyolo_models.data import plain_jpeg; "
            "print(plain_jpeg.cpu_operator() is not None, 'torchvision' in sys.modules, 'torch._dynamo' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.split() == ["True", "False", "False"]


def test_without_torchvisions_decoder_pil_decodes_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "p.jpg"
    photo().save(path, "JPEG", quality=90)
    fast = read_image_file(path)[0]
    monkeypatch.setattr(plain_jpeg, "cpu_operator", lambda: None)
    np.testing.assert_array_equal(read_image_file(path)[0], fast)
