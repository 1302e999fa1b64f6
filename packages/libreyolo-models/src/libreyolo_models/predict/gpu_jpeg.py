"""JPEG files decoded on the GPU (nvJPEG) for predict on CUDA.

Decoding is what is left of a graphed predict call on the host: a 1280x720 JPEG took 2.5 ms to
decode for the letterbox on the H200 machine's CPU (reduced DCT scale, ``data.image_files.read_image_for``)
against 0.63 ms for nvJPEG, and 0.10 ms an image when 32 decode in one call
(``tools/probe_decode.py``, docs/benchmarks.md). So on CUDA predict reads JPEG files as bytes on
its decoding threads and decodes each batch of them in one call on the GPU, where the letterbox
then runs; other formats and the JPEGs nvJPEG does not take (CMYK, 12-bit, lossless) decode on the
CPU as before.

The decoder: TorchCodec's ``decode_jpeg`` where it loads (the optional extra, ``pip install
'libreyolo[nvjpeg]'``), else torchvision's nvJPEG operator, which the default install's CUDA
torchvision carries (``data.plain_jpeg.nvjpeg_operator``, loaded without importing torchvision;
torchvision 0.29 deprecates it in favour of TorchCodec's, and once it is gone "auto" decodes on
the CPU). torchvision's allocates its outputs on the caller's stream but writes them on a stream of
its own without waiting for the caller's (pytorch/vision#9606), so it runs with a stream of ours
current (``TorchvisionNvjpeg``).

What changes for a user: the pixels. nvJPEG's inverse DCT and chroma upsampling are not
libjpeg-turbo's: on the probe's images the letterboxed network input differed from the CPU
decoder's by 0.03-1.5 grey levels on average (a few pixels by up to 62), about what the reduced
DCT decode already costs (0.15 on average, 77 at most); predictions move accordingly, and
validation, which decodes on the CPU, no longer sees exactly predict's pixels.
``gpu_decode=False`` keeps the CPU decoder (and validation's pixels). ``Results.orig_img`` is
decoded on the CPU from the kept bytes when first read, as after a reduced decode.

EXIF orientation follows the CPU decoder's reading of the header (``data.decode.exif_orientation``):
TorchCodec applies the tag itself on the CPU; whether its nvJPEG path does is tried once per device
(``_device_orients``), and where it does not, the decoded picture is turned here.
"""

from __future__ import annotations

import importlib.util
import io
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from PIL import Image
from torch import Tensor

from ..data.decode import ImageDecodeError, exif_orientation, read_image_file, shown_size
from ..data.plain_jpeg import RGB_MODE, cpu_operator, nvjpeg_operator
from ..errors import ConfigError, MissingExtraError

log = logging.getLogger(__name__)

EXTRA = "nvjpeg"
"""The optional extra that installs the GPU decoder (TorchCodec)."""

GpuDecodeRequest = bool | Literal["auto"]

NOT_INSTALLED = "neither TorchCodec nor torchvision's nvJPEG operator is installed"

MAX_AREA_PER_INPUT = 16
"""A JPEG goes to the GPU when it has at most this many times the letterbox's pixels (6.6 MP at
imgsz 640: 720p, 1080p and 1440p frames do). Larger photos decode on the CPU at a reduced DCT scale,
as before: fully decoded on the device, a batch of 32 twelve-megapixel photos would hold 1.1 GB of
pixels there for one letterbox."""

_NVJPEG_MODES = {"RGB", "L"}  # 3-component YCbCr and greyscale 8-bit JPEGs; CMYK and the rest stay on the CPU
NO_PIXELS = np.empty((0, 0, 3), dtype=np.uint8)
"""``Frame.image`` of a file whose pixels are decoded on the device (its bytes travel instead)."""


@dataclass(frozen=True)
class EncodedJpeg:
    """A JPEG file read but not decoded: its bytes and the picture's ``(h, w)`` after EXIF
    orientation (from the header). ``alone``: it was the whole source, so failing to decode it is
    an error rather than a skipped item."""

    data: bytes
    name: str
    orig_shape: tuple[int, int]
    alone: bool = False
    orientation: int = 1
    """The EXIF orientation tag as the CPU decoder reads it (1: as stored)."""


class TorchvisionNvjpeg:
    """torchvision's nvJPEG batch decoder, called as TorchCodec's ``decode_jpeg`` is (a list of
    1-D uint8 CPU tensors, or one, and ``device=``; CHW uint8 RGB back); on the CPU its
    libjpeg-turbo twin.

    On CUDA it decodes with a stream of ours current, on which nothing else runs: its outputs then
    come from memory only that stream has freed, each output is marked as used on the caller's
    stream (``record_stream``) so the allocator hands it to a later decode only once the caller's
    kernels that read it are done, and the caller's stream waits for the decode. Called as it is,
    the operator could be handed a block the caller's queued kernels still read and overwrite it
    (pytorch/vision#9606). The cost: decoded pictures are cached in that stream's pool, apart from
    the model's (reserved memory; a batch of 32 1080p frames is 200 MB). torchvision keeps one
    decoder per process and rebuilds it when the device changes, so predicting on two GPUs in
    turn in one process pays that rebuild each time."""

    name = "torchvision's nvJPEG"

    def __init__(self, operator: Callable[..., Any]) -> None:
        self._operator = operator
        self._streams: dict[torch.device, torch.cuda.Stream] = {}

    def __call__(self, data: Tensor | list[Tensor], device: torch.device | str = "cpu") -> Tensor | list[Tensor]:
        device = torch.device(device)
        items = data if isinstance(data, list) else [data]
        if device.type == "cuda":
            out = self._on_own_stream(items, _indexed(device))
        else:
            cpu = cpu_operator()
            if cpu is None:
                raise RuntimeError("torchvision's CPU JPEG decoder is not available")
            out = [cpu(item, RGB_MODE) for item in items]
        return out if isinstance(data, list) else out[0]

    def _on_own_stream(self, items: list[Tensor], device: torch.device) -> list[Tensor]:
        caller = torch.cuda.current_stream(device)
        own = self._streams.get(device)
        if own is None:
            own = self._streams[device] = torch.cuda.Stream(device)
        with torch.cuda.device(device), torch.cuda.stream(own):
            out = list(self._operator(items, RGB_MODE, device))
        caller.wait_stream(own)  # the operator made ours wait for its stream; the caller's now waits for ours
        for tensor in out:
            tensor.record_stream(caller)
        return out


@cache
def _decoder() -> Callable[..., Any] | None:
    """TorchCodec's ``decode_jpeg`` where it loads, else torchvision's nvJPEG
    (``TorchvisionNvjpeg``), else None."""
    return _torchcodec_decoder() or _torchvision_decoder()


def _torchcodec_decoder() -> Callable[..., Any] | None:
    """TorchCodec's ``decode_jpeg``, or None when it is missing or cannot load against this torch
    (its wheels link one CUDA major version and one range of torch releases)."""
    try:
        from torchcodec.decoders import decode_jpeg
    except ImportError:
        return None
    except Exception as err:  # noqa: BLE001 - installed, but its native library does not load here
        log.info("TorchCodec is installed but does not load (%s: %s)", type(err).__name__, err)
        return None
    return decode_jpeg


def _torchvision_decoder() -> TorchvisionNvjpeg | None:
    operator = nvjpeg_operator()
    return None if operator is None else TorchvisionNvjpeg(operator)


def decoder_name(decode: Callable[..., Any] | None = None) -> str:
    """Which device decoder ``decode`` (default: the one predict uses) is, for messages."""
    decode = _decoder() if decode is None else decode
    return "no device JPEG decoder" if decode is None else getattr(decode, "name", "TorchCodec")


_chosen: dict[torch.device, Callable[..., Any]] = {}
"""Per CUDA device, the decoder whose probe passed there (``_device_failure``)."""


def _candidates() -> list[Callable[..., Any]]:
    """The device decoders to try, in order: ``_decoder()``'s, then torchvision's where that is
    TorchCodec (PyPI's TorchCodec wheels decode on the CPU only; torchvision's CUDA build can)."""
    first = _decoder()
    if first is None:
        return []
    fallback = None if isinstance(first, TorchvisionNvjpeg) else _torchvision_decoder()
    return [first] if fallback is None else [first, fallback]


@cache
def _device_failure(device: torch.device) -> str | None:
    """Why no device decoder can decode on ``device`` (a tiny JPEG tried once per device and
    decoder), or None when one can (kept in ``_chosen``): a TorchCodec built without CUDA, or for
    another CUDA, imports fine and fails here."""
    _chosen.pop(device, None)
    reasons = []
    for decode in _candidates():
        why = _probe_failure(decode, device)
        if why is None:
            _chosen[device] = decode
            return None
        reasons.append(why)
    if reasons:
        return "; ".join(reasons)
    return NOT_INSTALLED if not _installed() else f"TorchCodec is installed but does not load with torch {torch.__version__}"


def _probe_failure(decode: Callable[..., Any], device: torch.device) -> str | None:
    name = decoder_name(decode)
    try:
        decoded = decode([_probe_jpeg(np.full((8, 16, 3), (200, 40, 90), np.uint8))], device=device)
    except Exception as err:  # noqa: BLE001 - any failure means: not on this device
        return f"{name} cannot decode on {device} ({type(err).__name__}: {str(err)[:200]})"
    if len(decoded) != 1 or tuple(decoded[0].shape) != (3, 8, 16) or decoded[0].device != device:
        return f"{name}'s decode on {device} returned an unexpected result"
    return None


def _device_decoder(device: torch.device) -> Callable[..., Any] | None:
    """The decoder for ``device``: the one its probe chose (CUDA), else ``_decoder()``'s."""
    return _chosen.get(_indexed(device)) if device.type == "cuda" and _indexed(device) in _chosen else _decoder()


def resolve_gpu_decode(request: GpuDecodeRequest, device: torch.device) -> bool:
    """Whether predict decodes JPEG files on ``device``: ``"auto"`` on CUDA when the device decoder
    (``_decoder``) decodes there (tried once per device; a log line says why not); ``True`` insists
    (an error naming the fix otherwise); ``False`` never.

    Raises:
        ConfigError: ``True`` off CUDA, or a value other than True, False or "auto".
        ImportError: ``True`` when no device decoder loads or decodes on ``device``.
    """
    if request is False:
        return False
    if request == "auto" and not isinstance(request, bool):
        if device.type != "cuda":
            return False
        why = _device_failure(_indexed(device))
        if why is not None and why != NOT_INSTALLED:
            # a warning where the user installed TorchCodec for this; torchvision's came unasked
            _log_once(f"JPEG files decode on the CPU: {why}", logging.WARNING if _installed() else logging.INFO)
        elif why is None:
            _log_once(f"JPEG files decode on {_indexed(device)} with {decoder_name(_device_decoder(device))} "
                      "(gpu_decode=False: on the CPU, with validation's pixels)", logging.INFO)
        return why is None
    if request is not True:
        raise ConfigError(f"gpu_decode={request!r} must be True, False or 'auto'")
    if device.type != "cuda":
        raise ConfigError(f"gpu_decode=True decodes JPEGs with nvJPEG on a CUDA GPU, but predict runs on {device}; "
                          "pass device=0 (or leave gpu_decode at 'auto')")
    why = _device_failure(_indexed(device))
    if why is not None:
        raise MissingExtraError(f"gpu_decode=True: {why}; pip install -U 'libreyolo[{EXTRA}]' (a TorchCodec built for "
                                f"this torch and CUDA), or pass gpu_decode=False")
    return True


def _indexed(device: torch.device) -> torch.device:
    if device.index is not None:
        return device
    return torch.device(device.type, torch.cuda.current_device() if torch.cuda.is_available() else 0)


def _installed() -> bool:
    try:
        return importlib.util.find_spec("torchcodec") is not None
    except (ImportError, ValueError):  # a module entry of None, or a broken parent package
        return False


@cache
def _log_once(message: str, level: int = logging.WARNING) -> None:
    log.log(level, message)


def read_encoded(path: Path, data: bytes, *, imgsz: int | None = None, alone: bool = False) -> EncodedJpeg | None:
    """``data`` kept for the GPU when it is a complete 8-bit RGB or greyscale JPEG of at most
    ``MAX_AREA_PER_INPUT`` times an ``imgsz`` letterbox's pixels (header only: nothing is decoded
    here), else None (the CPU decoder takes it, and names what is wrong with it)."""
    if not data.startswith(b"\xff\xd8\xff") or data.rfind(b"\xff\xd9") < data.rfind(b"\xff\xda"):
        # not a JPEG, or one whose last scan never ends (a truncated file: inside a scan 0xFF is
        # always escaped, so no end-of-image marker follows it): the CPU decoder reports it
        return None
    try:
        with Image.open(io.BytesIO(data)) as im:  # the header: size, mode, EXIF; a decompression-bomb check
            if im.format != "JPEG" or im.mode not in _NVJPEG_MODES or min(im.size) < 1:
                return None
            w, h = im.size
            if imgsz is not None and w * h > MAX_AREA_PER_INPUT * imgsz * imgsz:
                return None
            shape, orientation = shown_size(im), exif_orientation(im)
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError):
        return None  # the CPU decoder reads it again and says why it cannot
    return EncodedJpeg(data, str(path), shape, alone, orientation)


def decode_on_device(items: Sequence[EncodedJpeg], device: torch.device) -> list[Tensor | ImageDecodeError]:
    """``items`` as ``uint8 [H, W, 3]`` RGB tensors on ``device`` (EXIF orientation applied), in
    one decoder call; an image the device decoder refuses, or decodes to another size than its
    header's, is decoded on the CPU instead and uploaded, and one that cannot be decoded at all
    is returned as the error naming it."""
    decode = _device_decoder(device)
    if decode is None:
        raise MissingExtraError(f"JPEG decoding on the GPU: no device decoder loads with torch {torch.__version__}; "
                                f"pip install -U 'libreyolo[{EXTRA}]' (TorchCodec)")
    raw = [_encoded(item.data) for item in items]
    try:
        decoded: list[Tensor | None] = list(decode(raw, device=device))
    except RuntimeError:  # one bad image fails the whole call: decode them one by one
        decoded = [_one(decode, r, device) for r in raw]
    out: list[Tensor | ImageDecodeError] = []
    for item, chw in zip(items, decoded):
        turns = None if item.orientation == 1 else _device_orients(device)
        if chw is not None and chw.dim() == 3 and (item.orientation == 1 or turns is not None):
            hwc = (chw if chw.shape[0] == 3 else chw.expand(3, -1, -1)).permute(1, 2, 0)
            if turns is False:
                hwc = oriented(hwc, item.orientation)
            if tuple(hwc.shape[:2]) == item.orig_shape:
                out.append(hwc)
                continue
        try:  # the CPU decoder: the same pixels as a file decoded without nvJPEG, or the reason it fails
            pixels = read_image_file(item.name, data=item.data)[0]
        except ImageDecodeError as err:
            out.append(err)
            continue
        out.append(torch.from_numpy(pixels.copy()).to(device))  # a writable copy (decoders hand out read-only arrays)
    return out


def oriented(hwc: Tensor, orientation: int) -> Tensor:
    """``hwc`` (``[H, W, C]``, as stored) as a viewer shows it under EXIF ``orientation``: what
    ``PIL.ImageOps.exif_transpose`` does, on any device."""
    if orientation in (2, 4):  # mirrored left-right, top-bottom
        return hwc.flip(1 if orientation == 2 else 0)
    if orientation == 3:
        return hwc.flip(0, 1)
    if orientation in (5, 7):  # transposed about the main diagonal, or the other one
        return hwc.transpose(0, 1) if orientation == 5 else hwc.flip(0, 1).transpose(0, 1)
    if orientation in (6, 8):  # turned a quarter clockwise (6) or counter-clockwise (8) to show
        return torch.rot90(hwc, -1 if orientation == 6 else 1, (0, 1))
    return hwc


@cache
def _device_orients(device: torch.device) -> bool | None:
    """Whether the device decoder applies a JPEG's EXIF orientation itself, tried once per device on
    a tiny picture white on its left half: tagged mirrored (2), the white must move right; tagged
    turned (6: a quarter clockwise to show), the picture must stand up with the white on top.
    False when it leaves both as stored; None when it does anything else, or fails (pictures with a
    tag then decode on the CPU)."""
    decode = _device_decoder(device)
    assert decode is not None  # decode_on_device checked
    picture = np.zeros((8, 16, 3), np.uint8)
    picture[:, :8] = 255
    seen = []
    for tag in (2, 6):
        try:
            chw = decode([_probe_jpeg(picture, orientation=tag)], device=device)[0]
        except Exception as err:  # noqa: BLE001 - any failure means: not known on this device
            log.info("JPEGs with an EXIF orientation decode on the CPU: the device decoder failed on a probe (%s: %s)",
                     type(err).__name__, err)
            return None
        grey = chw.float().mean(0)
        if tuple(grey.shape) == (8, 16):
            left, right = grey[:, :8].mean(), grey[:, 8:].mean()
            seen.append("turned" if tag == 2 and right > left else "stored" if left > right else "other")
        elif tuple(grey.shape) == (16, 8) and tag == 6:
            seen.append("turned" if grey[:8].mean() > grey[8:].mean() else "other")
        else:
            seen.append("other")
    if seen == ["turned", "turned"]:
        return True
    if seen == ["stored", "stored"]:
        return False
    log.info("JPEGs with an EXIF orientation decode on the CPU: the device decoder turns pictures unlike "
             "PIL (probe: %s)", seen)
    return None


def _encoded(data: bytes) -> Tensor:
    """A file's bytes as the decoder takes them (a 1-D uint8 tensor on the CPU)."""
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def _probe_jpeg(picture: np.ndarray, orientation: int = 1) -> Tensor:
    """``picture`` encoded as a JPEG (with an EXIF orientation tag unless 1), for the device probes."""
    buf = io.BytesIO()
    exif = Image.Exif()
    if orientation != 1:
        exif[0x0112] = orientation
    Image.fromarray(picture).save(buf, "JPEG", exif=exif, quality=95)
    return _encoded(buf.getvalue())


def _one(decode: Callable[..., Any], raw: Tensor, device: torch.device) -> Tensor | None:
    try:
        return decode(raw, device=device)
    except RuntimeError:
        return None


__all__ = ["EXTRA", "MAX_AREA_PER_INPUT", "NO_PIXELS", "EncodedJpeg", "GpuDecodeRequest", "TorchvisionNvjpeg",
           "decode_on_device", "decoder_name", "oriented", "read_encoded", "resolve_gpu_decode"]
