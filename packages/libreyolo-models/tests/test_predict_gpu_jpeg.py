"""JPEG files decoded by the device decoder (``predict.gpu_jpeg``): which files go to it, what a
user gets back (the same boxes as from the same pixels decoded on the CPU, the full picture on
``orig_img``), and what happens to the files it cannot take. On the CPU the path runs with the
decoder's CPU twin (TorchCodec's or torchvision's libjpeg-turbo, the same pixels as PIL's), forced
on; the ``cuda`` tests run nvJPEG (TorchCodec's where installed, else torchvision's)."""

from __future__ import annotations

import io
import logging

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

import libreyolo_models.predict.predictor as predictor_module
from libreyolo_models import LibreYOLO9
from libreyolo_models.data.image_files import read_image
from libreyolo_models.errors import ConfigError, SourceError
from libreyolo_models.predict import gpu_jpeg

if gpu_jpeg._decoder() is None:
    pytest.skip("no device JPEG decoder here (TorchCodec, or torchvision's image library)", allow_module_level=True)

IMGSZ = 64


def _confident(device: str | int) -> LibreYOLO9:
    torch.manual_seed(0)
    m = LibreYOLO9(size="t", nc=3, names=["circle", "square", "triangle"], imgsz=IMGSZ, device=device)
    with torch.no_grad():  # confident enough to give boxes to compare
        for seq in m.net.head.cv3:
            seq[-1].bias.copy_(torch.tensor([0.3, 0.7, 0.2]))
    return m


@pytest.fixture(scope="module")
def model() -> LibreYOLO9:
    return _confident("cpu")


def _scene(seed: int, h: int = 96, w: int = 160) -> np.ndarray:
    rng = np.random.default_rng(seed)
    img = np.full((h, w, 3), 90, np.uint8)
    for _ in range(4):
        y, x = rng.integers(0, h - 20), rng.integers(0, w - 30)
        img[y:y + 20, x:x + 30] = rng.integers(0, 255, 3)
    return img


@pytest.fixture
def forced(monkeypatch):
    """The device decoder on, whatever the device (here: its CPU twin)."""
    monkeypatch.setattr(predictor_module, "resolve_gpu_decode", lambda request, device: request is not False)


def test_read_encoded_keeps_rgb_and_grey_jpegs_and_leaves_the_rest_to_the_cpu(tmp_path) -> None:
    rgb, grey, cmyk, png = (tmp_path / n for n in ("rgb.jpg", "grey.jpg", "cmyk.jpg", "a.png"))
    Image.fromarray(_scene(0)).save(rgb)
    Image.fromarray(_scene(1)[..., 0]).save(grey)
    Image.fromarray(_scene(2)).convert("CMYK").save(cmyk)
    Image.fromarray(_scene(3)).save(png)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotated: width and height swap on display
    rotated = tmp_path / "rotated.jpg"
    Image.fromarray(_scene(4)).save(rotated, exif=exif)
    assert gpu_jpeg.read_encoded(rgb, rgb.read_bytes()).orig_shape == (96, 160)  # type: ignore[union-attr]
    assert gpu_jpeg.read_encoded(grey, grey.read_bytes()) is not None
    assert gpu_jpeg.read_encoded(rotated, rotated.read_bytes()).orig_shape == (160, 96)  # type: ignore[union-attr]
    assert gpu_jpeg.read_encoded(cmyk, cmyk.read_bytes()) is None
    assert gpu_jpeg.read_encoded(png, png.read_bytes()) is None
    assert gpu_jpeg.read_encoded(rgb, b"\xff\xd8\xff\xe0 not a JPEG after all") is None
    # larger than MAX_AREA_PER_INPUT letterboxes: the CPU's reduced decode takes it
    assert gpu_jpeg.read_encoded(rgb, rgb.read_bytes(), imgsz=32) is not None  # 96x160 = 15 x 32x32
    assert gpu_jpeg.read_encoded(rgb, rgb.read_bytes(), imgsz=30) is None      # 17 x 30x30
    whole = rgb.read_bytes()
    assert gpu_jpeg.read_encoded(rgb, whole[:-50]) is None  # its scan cut short: the CPU reports it


def test_decode_on_device_gives_the_cpu_decoders_pixels_and_names_what_it_cannot_read(tmp_path) -> None:
    paths = []
    for i in range(3):
        paths.append(tmp_path / f"{i}.jpg")
        Image.fromarray(_scene(i)).save(paths[-1], quality=85)
    exif = Image.Exif()
    exif[0x0112] = 8
    paths.append(tmp_path / "rotated.jpg")
    Image.fromarray(_scene(9)).save(paths[-1], exif=exif)
    items = [gpu_jpeg.read_encoded(p, p.read_bytes()) for p in paths]
    assert all(items)
    truncated = gpu_jpeg.EncodedJpeg(paths[0].read_bytes()[:300], str(tmp_path / "cut.jpg"), (96, 160))
    out = gpu_jpeg.decode_on_device([*items, truncated], torch.device("cpu"))  # type: ignore[list-item]
    for path, pixels in zip(paths, out):
        assert isinstance(pixels, torch.Tensor) and pixels.dtype == torch.uint8
        assert torch.equal(pixels, torch.from_numpy(read_image(path).copy()))  # EXIF orientation included
    assert isinstance(out[-1], gpu_jpeg.ImageDecodeError) and "cut.jpg" in str(out[-1])


@pytest.fixture
def torchvision_decoder(monkeypatch):
    """The device decoder as the default install has it: torchvision's (TorchCodec absent)."""
    monkeypatch.setattr(gpu_jpeg, "_torchcodec_decoder", lambda: None)
    for cached in (gpu_jpeg._decoder, gpu_jpeg._device_orients, gpu_jpeg._device_failure):
        cached.cache_clear()
    decode = gpu_jpeg._decoder()
    if not isinstance(decode, gpu_jpeg.TorchvisionNvjpeg):
        pytest.skip("torchvision's image library is not here")
    yield decode
    monkeypatch.undo()
    for cached in (gpu_jpeg._decoder, gpu_jpeg._device_orients, gpu_jpeg._device_failure):
        cached.cache_clear()


def test_without_torchcodec_torchvisions_decoder_gives_the_same_pixels(tmp_path, torchvision_decoder) -> None:
    """The default install's device decoder (torchvision's, TorchCodec absent), on the CPU through
    its libjpeg-turbo twin: PIL's pixels, EXIF orientations applied here (torchvision leaves them
    as stored, which the orientation probe finds out), one image or a list."""
    assert gpu_jpeg.decoder_name() == "torchvision's nvJPEG"
    assert gpu_jpeg._device_orients(torch.device("cpu")) is False
    paths = _each_orientation(tmp_path)
    items = [gpu_jpeg.read_encoded(p, p.read_bytes()) for p in paths]
    out = gpu_jpeg.decode_on_device(items, torch.device("cpu"))  # type: ignore[arg-type]
    for path, pixels in zip(paths, out):
        assert isinstance(pixels, torch.Tensor) and torch.equal(pixels, torch.from_numpy(read_image(path).copy())), path
    one = torchvision_decoder(gpu_jpeg._encoded(paths[0].read_bytes()))
    assert isinstance(one, torch.Tensor) and one.shape == (3, 96, 160)


def _each_orientation(tmp_path) -> list:
    """One JPEG per EXIF orientation 1..8 of a picture that no turn or mirror maps onto itself."""
    paths = []
    for o in range(1, 9):
        exif = Image.Exif()
        exif[0x0112] = o
        paths.append(tmp_path / f"o{o}.jpg")
        Image.fromarray(_scene(20 + o)).save(paths[-1], exif=exif, quality=95)
    return paths


def test_oriented_turns_a_tensor_as_pil_turns_the_image() -> None:
    stored = _scene(5)
    for o in range(1, 9):
        im = Image.fromarray(stored)
        im.getexif()[0x0112] = o
        shown = np.asarray(ImageOps.exif_transpose(im)).copy()
        assert torch.equal(gpu_jpeg.oriented(torch.from_numpy(stored), o), torch.from_numpy(shown)), o


@pytest.mark.parametrize("decoder_orients", [True, False])
def test_every_exif_orientation_decodes_as_the_cpu_decoder_shows_it(tmp_path, monkeypatch, decoder_orients) -> None:
    """A device decoder that turns pictures by their EXIF tag itself (TorchCodec's) is left to it;
    one that does not (torchvision's; tried once per device) gets them turned here. Either way:
    the CPU decoder's pixels, not its fallback."""
    paths = _each_orientation(tmp_path)
    items = [gpu_jpeg.read_encoded(p, p.read_bytes()) for p in paths]
    assert [it.orientation for it in items] == list(range(1, 9))  # type: ignore[union-attr]

    def pil_decoder(raws, device):  # PIL's pixels, turned by the tag or as stored
        pictures = [Image.open(io.BytesIO(r.numpy().tobytes())) for r in raws]
        shown = [ImageOps.exif_transpose(p) if decoder_orients else p for p in pictures]
        return [torch.from_numpy(np.asarray(p.convert("RGB")).copy()).permute(2, 0, 1).to(device) for p in shown]

    monkeypatch.setattr(gpu_jpeg, "_decoder", lambda: pil_decoder)
    monkeypatch.setattr(gpu_jpeg, "read_image_file", lambda *a, **k: pytest.fail("fell back to the CPU decoder"))
    gpu_jpeg._device_orients.cache_clear()
    try:
        assert gpu_jpeg._device_orients(torch.device("cpu")) is decoder_orients
        out = gpu_jpeg.decode_on_device(items, torch.device("cpu"))  # type: ignore[arg-type]
    finally:
        gpu_jpeg._device_orients.cache_clear()
    for path, pixels in zip(paths, out):
        assert isinstance(pixels, torch.Tensor)
        assert torch.equal(pixels, torch.from_numpy(read_image(path).copy())), path.name


def test_when_the_orientation_probe_fails_tagged_pictures_decode_on_the_cpu(tmp_path, monkeypatch) -> None:
    paths = _each_orientation(tmp_path)[:3]
    items = [gpu_jpeg.read_encoded(p, p.read_bytes()) for p in paths]
    real = gpu_jpeg._decoder()
    assert real is not None

    def fails_on_the_probe(raws, device):
        if len(raws[0]) < 1000:  # the 16x8 probe
            raise RuntimeError("nvJPEG: unsupported")
        return real(raws, device=device)

    monkeypatch.setattr(gpu_jpeg, "_decoder", lambda: fails_on_the_probe)
    cpu_reads: list[str] = []
    read = gpu_jpeg.read_image_file
    monkeypatch.setattr(gpu_jpeg, "read_image_file", lambda name, **k: cpu_reads.append(name) or read(name, **k))
    gpu_jpeg._device_orients.cache_clear()
    try:
        out = gpu_jpeg.decode_on_device(items, torch.device("cpu"))  # type: ignore[arg-type]
        assert gpu_jpeg._device_orients(torch.device("cpu")) is None
    finally:
        gpu_jpeg._device_orients.cache_clear()
    assert cpu_reads == [str(p) for p in paths[1:]]  # orientation 1 stayed with the device decoder
    for path, pixels in zip(paths, out):
        assert torch.equal(pixels, torch.from_numpy(read_image(path).copy())), path.name


def test_predict_with_the_device_decoder_equals_predict_on_the_same_pixels(model, tmp_path, forced) -> None:
    """A folder of JPEGs and a PNG: the boxes are those of the same pictures given as arrays
    (decoded by PIL at full size), orig_img is the full picture, decoded when read, and
    gpu_decode=False keeps the CPU decoder."""
    for i in range(4):
        Image.fromarray(_scene(i, 200, 320)).save(tmp_path / f"{i}.jpg", quality=90)
    Image.fromarray(_scene(7, 200, 320)).save(tmp_path / "4.png")
    files = sorted(tmp_path.iterdir())
    got = model(tmp_path, batch=2, conf=0.01)
    ref = model([read_image(p) for p in files], batch=2, conf=0.01)
    assert [r.source for r in got] == [str(p) for p in files]
    assert sum(len(r) for r in got) > 0
    for a, b, path in zip(got, ref, files):
        assert a.orig_shape == (200, 320)
        if path.suffix == ".jpg":  # decoded from the kept bytes on first access, not before
            assert "orig_img" not in a.__dict__
        assert torch.equal(a.boxes.data, b.boxes.data)
        assert np.array_equal(a.orig_img, read_image(path))
        assert a.speed["decode"] >= 0.0
    calls: list[int] = []
    real = predictor_module.decode_on_device
    try:
        predictor_module.decode_on_device = lambda items, device: calls.append(len(items)) or real(items, device)
        model(tmp_path, batch=2, conf=0.01, gpu_decode=False)
        assert calls == []
        model(tmp_path, batch=2, conf=0.01)
        assert calls == [2, 2]  # the PNG decodes on the CPU; one decoder call per batch
    finally:
        predictor_module.decode_on_device = real


def test_a_file_the_device_cannot_decode_is_skipped_or_is_the_error(model, tmp_path, forced, caplog) -> None:
    good = tmp_path / "good.jpg"
    Image.fromarray(_scene(0)).save(good)
    bad = tmp_path / "zbad.jpg"
    data = good.read_bytes()
    bad.write_bytes(data[: len(data) // 3])  # a valid header, its scan cut short
    with caplog.at_level(logging.WARNING):
        results = model(tmp_path, conf=0.01)
    assert [r.source for r in results] == [str(good)]
    assert [name for name, _ in results.skipped] == [str(bad)]
    assert str(bad) in caplog.text
    with pytest.raises(SourceError, match="zbad.jpg"):
        model(bad, conf=0.01)


def test_gpu_decode_settings_are_checked(model, monkeypatch) -> None:
    with pytest.raises(ConfigError, match="gpu_decode='maybe'"):
        model(np.zeros((32, 32, 3), np.uint8), gpu_decode="maybe")
    with pytest.raises(ConfigError, match="CUDA"):
        gpu_jpeg.resolve_gpu_decode(True, torch.device("cpu"))
    from libreyolo_models import LibreYOLO

    classifier = LibreYOLO(family="mobilenetv4", size="small")  # its centre crop reads the full picture
    with pytest.raises(ConfigError, match="gpu_decode=True: a classify model"):
        classifier(np.zeros((32, 32, 3), np.uint8), gpu_decode=True)
    assert gpu_jpeg.resolve_gpu_decode("auto", torch.device("cpu")) is False
    monkeypatch.setattr(gpu_jpeg, "_decoder", lambda: None)
    gpu_jpeg._device_failure.cache_clear()
    try:
        assert gpu_jpeg.resolve_gpu_decode("auto", torch.device("cuda")) is False
        monkeypatch.setitem(__import__("sys").modules, "torchcodec", None)
        gpu_jpeg._device_failure.cache_clear()
        with pytest.raises(ImportError, match=r"neither TorchCodec nor torchvision.s nvJPEG.*libreyolo\[nvjpeg\]"):
            gpu_jpeg.resolve_gpu_decode(True, torch.device("cuda"))
    finally:
        gpu_jpeg._device_failure.cache_clear()


def test_a_torchcodec_that_cannot_decode_on_the_device_turns_auto_off(monkeypatch, caplog) -> None:
    """A TorchCodec that imports but fails on the device (built without CUDA, or for another
    CUDA) is found out once, by a tiny JPEG: "auto" falls back to the CPU with one warning."""

    def no_cuda(sources, device="cpu"):
        raise RuntimeError("torchcodec was not compiled with nvJPEG support")

    monkeypatch.setattr(gpu_jpeg, "_decoder", lambda: no_cuda)
    monkeypatch.setattr(gpu_jpeg, "_torchvision_decoder", lambda: None)  # TorchCodec alone
    monkeypatch.setattr(gpu_jpeg, "_installed", lambda: True)  # the user installed the extra for this
    gpu_jpeg._device_failure.cache_clear()
    gpu_jpeg._log_once.cache_clear()
    try:
        with caplog.at_level(logging.WARNING):
            assert gpu_jpeg.resolve_gpu_decode("auto", torch.device("cuda", 0)) is False
            assert gpu_jpeg.resolve_gpu_decode("auto", torch.device("cuda", 0)) is False
        assert caplog.text.count("not compiled with nvJPEG") == 1
        with pytest.raises(ImportError, match="cannot decode on cuda:0"):
            gpu_jpeg.resolve_gpu_decode(True, torch.device("cuda", 0))
    finally:
        gpu_jpeg._device_failure.cache_clear()


def test_a_torchvision_without_nvjpeg_turns_auto_off_quietly(monkeypatch, caplog) -> None:
    """torchvision's decoder comes with the default install, unasked: where it cannot decode on the
    device (a build without nvJPEG), "auto" stays on the CPU with an INFO line, not a warning."""

    def no_nvjpeg(items, mode, device):
        raise RuntimeError("decode_jpegs_cuda: torchvision not compiled with nvJPEG support")

    monkeypatch.setattr(gpu_jpeg, "_decoder", lambda: gpu_jpeg.TorchvisionNvjpeg(no_nvjpeg))
    monkeypatch.setattr(gpu_jpeg, "_installed", lambda: False)  # the default install: no TorchCodec
    monkeypatch.setattr(gpu_jpeg.TorchvisionNvjpeg, "_on_own_stream",
                        lambda self, items, device: self._operator(items, gpu_jpeg.RGB_MODE, device))
    gpu_jpeg._device_failure.cache_clear()
    gpu_jpeg._log_once.cache_clear()
    try:
        with caplog.at_level(logging.INFO, logger="libreyolo_models.predict.gpu_jpeg"):
            assert gpu_jpeg.resolve_gpu_decode("auto", torch.device("cuda", 0)) is False
        assert [r.levelno for r in caplog.records] == [logging.INFO]
        assert "torchvision's nvJPEG cannot decode on cuda:0" in caplog.text
    finally:
        gpu_jpeg._device_failure.cache_clear()
        gpu_jpeg._log_once.cache_clear()


def test_a_torchcodec_that_cannot_decode_on_the_gpu_hands_over_to_torchvisions(monkeypatch, caplog) -> None:
    """PyPI's TorchCodec wheels decode on the CPU only: where TorchCodec loads but fails on the
    device, torchvision's nvJPEG (tried next) decodes there instead of the CPU."""
    from types import SimpleNamespace

    def no_cuda(sources, device="cpu"):
        raise RuntimeError("torchcodec was not compiled with nvJPEG support")

    class Fallback(gpu_jpeg.TorchvisionNvjpeg):  # decodes the probe "on the device" without a GPU
        def __call__(self, data, device="cpu"):
            return [SimpleNamespace(shape=(3, 8, 16), device=device)]

    fallback = Fallback(lambda *args: None)
    monkeypatch.setattr(gpu_jpeg, "_decoder", lambda: no_cuda)
    monkeypatch.setattr(gpu_jpeg, "_torchvision_decoder", lambda: fallback)
    gpu_jpeg._device_failure.cache_clear()
    gpu_jpeg._log_once.cache_clear()
    try:
        with caplog.at_level(logging.INFO, logger="libreyolo_models.predict.gpu_jpeg"):
            assert gpu_jpeg.resolve_gpu_decode("auto", torch.device("cuda", 0)) is True
        assert gpu_jpeg._device_decoder(torch.device("cuda", 0)) is fallback
        assert gpu_jpeg._device_decoder(torch.device("cpu")) is no_cuda
        assert "decode on cuda:0 with torchvision's nvJPEG" in caplog.text
    finally:
        gpu_jpeg._device_failure.cache_clear()
        gpu_jpeg._log_once.cache_clear()
        gpu_jpeg._chosen.clear()


@pytest.mark.cuda
def test_nvjpeg_predict_is_close_to_the_cpu_decoders_and_graphs_once(tmp_path) -> None:
    """On CUDA by default: nvJPEG's pixels within a grey level on average of the CPU decoder's
    (every EXIF orientation shown alike), boxes close to the CPU-decoded run's, and a graphed folder still one graph."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    assert gpu_jpeg.resolve_gpu_decode("auto", torch.device("cuda"))
    big, small = tmp_path / "big", tmp_path / "small"
    big.mkdir()
    small.mkdir()
    paths = []
    for i in range(5):
        paths.append(big / f"{i}.jpg")
        Image.fromarray(_scene(i, 360, 640)).save(paths[-1], quality=90)
        Image.fromarray(_scene(i, 180, 320)).save(small / f"{i}.jpg", quality=90)  # within MAX_AREA_PER_INPUT at 64
    (tmp_path / "turned").mkdir()
    paths += _each_orientation(tmp_path / "turned")  # EXIF orientations 1..8: shown as the CPU decoder shows them
    items = [gpu_jpeg.read_encoded(p, p.read_bytes()) for p in paths]
    decoded = gpu_jpeg.decode_on_device(items, torch.device("cuda"))  # type: ignore[arg-type]
    for path, pixels in zip(paths, decoded):
        assert isinstance(pixels, torch.Tensor) and pixels.is_cuda
        shown = torch.from_numpy(read_image(path).copy())
        diff = (pixels.cpu().int() - shown.int()).abs().float().mean()
        if path.parent.name != "turned":
            assert diff < 1.0, (path, float(diff))
            continue
        # 96 x 160 pictures of flat blocks: nvJPEG and libjpeg differ by up to ~1 grey level on
        # average at the block edges; the orientation is right when the nearest of the eight is the
        # CPU decoder's, by a wide margin.
        stored = torch.from_numpy(np.asarray(Image.open(path).convert("RGB")).copy())
        turns = [gpu_jpeg.oriented(stored, o) for o in range(1, 9)]
        others = [(pixels.cpu().int() - t.int()).abs().float().mean()
                  for t in turns if t.shape == pixels.shape and not torch.equal(t, shown)]
        assert diff < 2.0 and all(diff * 4 < d for d in others), (path, float(diff), [float(d) for d in others])
    m = _confident(0)
    calls: list[int] = []
    real = predictor_module.decode_on_device
    try:
        predictor_module.decode_on_device = lambda items, device: calls.append(len(items)) or real(items, device)
        graphed = m(small, batch=2, conf=0.01, cuda_graph=True)
        eager = m(small, batch=2, conf=0.01)
    finally:
        predictor_module.decode_on_device = real
    assert calls == [2, 2, 1, 2, 2, 1]
    graphs = m.graph_info()["graphs"]
    assert len(graphs) == 1 and graphs[0]["replays"] == 3, graphs
    for a, b in zip(graphed, eager):
        assert torch.equal(a.boxes.data, b.boxes.data)
    cpu = m(small, batch=2, conf=0.01, gpu_decode=False)
    assert sum(len(r) for r in eager) > 0 and sum(len(r) for r in cpu) > 0
    for a, b in zip(eager, cpu):  # a grey level apart on average: about the same detections
        assert abs(len(a) - len(b)) <= max(2, len(b) // 10), (len(a), len(b))


def test_device_skips_keep_the_batch_shape_and_all_unreadable_is_the_error(model, tmp_path, forced,
                                                                         monkeypatch) -> None:
    """A file that neither the device nor the CPU can decode (its header fine, its data not: here
    one marked so, as decoders differ on what corrupt data they accept) leaves a short batch that
    still runs at the batch's size (one graph); a folder of nothing but such files is an error
    naming the first."""
    good = _scene(0)
    for name in ("1.jpg", "2.jpg", "3.jpg"):
        Image.fromarray(good).save(tmp_path / name)
    data = (tmp_path / "1.jpg").read_bytes()
    broken = data[:-2] + b"BROKEN" + data[-2:]  # trailing bytes before the end marker: still "complete"
    (tmp_path / "0.jpg").write_bytes(broken)
    assert gpu_jpeg.read_encoded(tmp_path / "0.jpg", broken) is not None
    decode, read_file = gpu_jpeg._decoder(), gpu_jpeg.read_image_file

    def device_refuses(raw, device="cpu"):
        if any(bytes(r[-8:-2]) == b"BROKEN" for r in (raw if isinstance(raw, list) else [raw])):
            raise RuntimeError("nvjpeg: bad data")
        return decode(raw, device=device)

    def cpu_refuses(path, **kwargs):
        if kwargs.get("data", b"")[-8:-2] == b"BROKEN":
            raise gpu_jpeg.ImageDecodeError(str(path), "corrupt image: bad data")
        return read_file(path, **kwargs)

    monkeypatch.setattr(gpu_jpeg, "_decoder", lambda: device_refuses)
    monkeypatch.setattr(gpu_jpeg, "read_image_file", cpu_refuses)
    seen: list[int] = []
    net = model.inference_net(model.wants_fuse(None))
    hook = net.register_forward_pre_hook(lambda _m, args: seen.append(args[0].shape[0]))
    try:
        results = model(tmp_path, batch=2, conf=0.01)
    finally:
        hook.remove()
    assert [r.source for r in results] == [str(tmp_path / n) for n in ("1.jpg", "2.jpg", "3.jpg")]
    assert [name for name, _ in results.skipped] == [str(tmp_path / "0.jpg")]
    assert seen == [2, 2]  # the first batch lost 0.jpg on the device and ran padded
    bad = tmp_path / "bad"
    bad.mkdir()
    for name in ("a.jpg", "b.jpg"):
        (bad / name).write_bytes(broken)
    with pytest.raises(SourceError, match=r"none of the 2 images could be read \(first: .*a\.jpg"):
        model(bad, conf=0.01)


def test_saving_leaves_auto_decoding_to_the_cpu(model, tmp_path, forced) -> None:
    """save, save_crop and show need every full picture on the host: with "auto" the CPU decodes
    it once (no device decode); gpu_decode=True still decodes on the device."""
    Image.fromarray(_scene(0)).save(tmp_path / "0.jpg")
    calls: list[int] = []
    real = predictor_module.decode_on_device
    try:
        predictor_module.decode_on_device = lambda items, device: calls.append(len(items)) or real(items, device)
        model(tmp_path / "0.jpg", conf=0.01, save=True, project=str(tmp_path / "runs"))
        assert calls == []
        model(tmp_path / "0.jpg", conf=0.01, save=True, project=str(tmp_path / "runs"), gpu_decode=True)
        assert calls == [1]
    finally:
        predictor_module.decode_on_device = real
    assert len(list((tmp_path / "runs").rglob("*.jpg"))) == 2


@pytest.mark.cuda
def test_torchvisions_nvjpeg_never_writes_into_memory_the_callers_queued_kernels_read(tmp_path) -> None:
    """pytorch/vision#9606: torchvision's operator allocates on the caller's stream and decodes on
    its own without waiting, so a block just freed on the caller's stream, still read by queued
    kernels, could be overwritten. Through ``TorchvisionNvjpeg`` (its own stream current) the
    queued reductions always see the values they were queued to read."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    operator = gpu_jpeg.nvjpeg_operator()
    if operator is None:
        pytest.skip("torchvision's nvJPEG operator is not here")
    decode = gpu_jpeg.TorchvisionNvjpeg(operator)
    path = tmp_path / "a.jpg"
    Image.fromarray(_scene(3, 360, 640)).save(path, quality=90)
    raw = [gpu_jpeg._encoded(path.read_bytes())] * 4
    expected = torch.from_numpy(read_image(path).copy()).permute(2, 0, 1)
    size = 3 * 360 * 640
    for _ in range(20):
        blocks = [torch.full((size,), 7, dtype=torch.uint8, device="cuda") for _ in range(8)]
        torch.cuda.synchronize()
        torch.cuda._sleep(20_000_000)  # the caller's stream busy, then the reductions queued behind it
        sums = [b.sum() for b in blocks]
        del blocks  # freed on the caller's stream while its reductions are still queued
        images = decode(raw, device=torch.device("cuda"))
        torch.cuda.synchronize()
        assert [int(s) for s in sums] == [7 * size] * 8
        for image in images:
            assert (image.cpu().int() - expected.int()).abs().float().mean() < 1.0
