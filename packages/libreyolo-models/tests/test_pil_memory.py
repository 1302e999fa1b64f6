"""A decoded picture's pixels as PIL holds them (RGB and a padding byte), without a copy: equal to
``np.asarray``'s, valid after the image is gone, and None wherever PIL cannot hand them over."""

from __future__ import annotations

import gc
import io
import pickle
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

from libreyolo_models.data import pil_memory
from libreyolo_models.data.pil_memory import rgbx_view
from libreyolo_models.predict.predictor import FrameBatch, Predictor
from libreyolo_models.predict.staging import Slot

arrow = pytest.mark.skipif(not pil_memory._exports_safely(), reason="this Pillow's Arrow export is missing or unsafe "
                                                         "(before 11.3, or padded rows): predict packs the pixels")


def _jpeg_draft() -> Image.Image:
    rng = np.random.default_rng(0)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (96, 160, 3), dtype=np.uint8)).save(buf, "JPEG", quality=90)
    im = Image.open(io.BytesIO(buf.getvalue()))
    im.draft("RGB", (80, 48))
    im.load()
    return im


@arrow
def test_the_view_is_the_pictures_pixels_and_outlives_the_image() -> None:
    im = _jpeg_draft()
    packed = np.asarray(im).copy()
    view = rgbx_view(im)
    assert view is not None and view.shape == (48, 80, 4) and view.dtype == np.uint8
    assert not view.flags.writeable and np.array_equal(view[..., :3], packed)
    im.close()
    del im
    gc.collect()
    others = [Image.new("RGB", (80, 48), (i, 255 - i, 7)) for i in range(20)]  # would reuse freed memory
    assert np.array_equal(view[..., :3], packed)
    assert np.array_equal(pickle.loads(pickle.dumps(view))[..., :3], packed)  # a decode process's result
    del others


@arrow
def test_nothing_without_a_copy_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    assert rgbx_view(Image.new("L", (8, 8))) is None and rgbx_view(Image.new("RGBA", (8, 8))) is None
    block = Image.core.get_block_size()
    Image.core.set_block_size(4096)
    try:
        spread = Image.new("RGB", (64, 64))  # 16 KiB over 4 KiB blocks
    finally:
        Image.core.set_block_size(block)
    assert rgbx_view(spread) is None
    monkeypatch.setattr(pil_memory, "_exports_safely", lambda: False)  # Pillow 11.2 (leaks), or padded rows
    assert rgbx_view(Image.new("RGB", (8, 8))) is None
    monkeypatch.undo()
    monkeypatch.delattr(Image.Image, "__arrow_c_array__")  # Pillow before 11.2
    assert rgbx_view(Image.new("RGB", (8, 8))) is None


def test_only_a_pillow_that_exports_safely_hands_its_memory_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """11.2's export leaks every picture; rows padded to an alignment are exported as if packed."""
    import PIL

    monkeypatch.setattr(PIL, "__version__", "11.2.1")
    assert not pil_memory._exports_safely()
    monkeypatch.setattr(PIL, "__version__", "11.3.0")
    monkeypatch.setattr(Image.core, "get_alignment", lambda: 64, raising=False)
    assert not pil_memory._exports_safely()
    monkeypatch.setattr(Image.core, "get_alignment", lambda: 1, raising=False)
    assert pil_memory._exports_safely()


def test_predict_uploads_a_staged_batch_at_once_and_drops_the_padding_byte() -> None:
    """``Predictor._upload`` on a model on the CPU (on CUDA the copies are the uploads): a batch
    staged in one buffer leaves as one tensor's rows, unpadded; pictures staged one by one leave
    one by one, a padded one unpadded, a three-channel one as it was; and the letterbox takes the
    unpadded views as it takes contiguous pictures."""
    from libreyolo_models.data.letterbox_images import letterbox_pixels

    fake = SimpleNamespace(model=SimpleNamespace(device=torch.device("cpu")))
    fake._slot_on_device = lambda batch: Predictor._slot_on_device(fake, batch)  # type: ignore[arg-type]
    buffer = torch.arange(2 * 3 * 5 * 4, dtype=torch.uint8).reshape(2, 3, 5, 4)
    out = Predictor._upload(fake, FrameBatch([], list(buffer.unbind(0)), 1.0, Slot(buffer)))  # type: ignore[arg-type]
    assert [tuple(p.shape) for p in out.pixels] == [(3, 5, 3)] * 2
    assert all(torch.equal(p, buffer[i, ..., :3]) for i, p in enumerate(out.pixels))
    for size in (5, 8):  # pasted as it is, and resized
        views, _ = letterbox_pixels(out.pixels, size, [(3, 5)] * 2)
        packed, _ = letterbox_pixels([p.contiguous() for p in out.pixels], size, [(3, 5)] * 2)
        assert torch.equal(views, packed)
    plain = torch.zeros(2, 2, 3, dtype=torch.uint8)
    out = Predictor._upload(fake, FrameBatch([], [buffer[0], plain], 1.0))  # type: ignore[arg-type]
    assert torch.equal(out.pixels[0], buffer[0, ..., :3]) and out.pixels[1] is plain


@pytest.mark.cuda
def test_on_cuda_the_letterbox_gets_each_pictures_reduced_decode_whether_staged_together_or_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Predict on CUDA: two same-size photographs staged in one buffer (one upload), or beside a
    third of another size (one by one): the letterbox receives each one's reduced decode on the
    GPU, three channels, as ``read_image_for`` reads it."""
    from libreyolo_models import LibreYOLO9
    from libreyolo_models.data import letterbox_images
    from libreyolo_models.data.image_files import read_image_for

    rng = np.random.default_rng(1)
    paths = []
    for i, (h, w) in enumerate([(180, 320), (180, 320), (240, 320)]):
        paths.append(tmp_path / f"p{i}.jpg")
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(paths[-1], quality=90)
    seen: list[list[torch.Tensor]] = []
    letterbox = letterbox_images.letterbox_pixels

    def recording(images: list[torch.Tensor], *args: object, **kwargs: object) -> object:
        seen.append([i.cpu() for i in images])
        return letterbox(images, *args, **kwargs)

    monkeypatch.setattr(letterbox_images, "letterbox_pixels", recording)
    model = LibreYOLO9(size="t", nc=3, imgsz=64)
    # gpu_decode=False: with TorchCodec these JPEGs would decode on the GPU, at full size
    model([str(p) for p in paths[:2]], batch=2, device=0, gpu_decode=False, verbose=False)    # one buffer
    model([str(p) for p in paths], batch=3, device=0, gpu_decode=False, verbose=False)        # mixed sizes
    expected = [torch.from_numpy(read_image_for(p, 64, resize=False).pixels[..., :3].copy()) for p in paths]
    assert [len(s) for s in seen] == [2, 3]
    for images in seen:
        assert all(torch.equal(got, want) for got, want in zip(images, expected))
