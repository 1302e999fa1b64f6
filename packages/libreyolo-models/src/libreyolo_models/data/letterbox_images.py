"""Letterboxing for inference: resize keeping the aspect ratio, pad to a fixed square.

Every image of a batch gets the same ``imgsz x imgsz`` canvas, so batched and one-by-one
prediction see identical inputs, and a CUDA graph sees one shape per batch size.

Two implementations with one geometry:

- :func:`letterbox_pixels` is what predict runs: uint8 pixels go to the model's device as they
  are (a quarter of the bytes of float32), and the resize, the grey bars and the ``[B, 3, S, S]``
  layout happen there as torch ops; the scaling to [0, 1] happens inside the network call
  (``LibreYOLO.inference_forward``), captured with it when graphed. :func:`letterbox_batch`
  is the same, scaled. The pasting and the final
  scaling are ``data.letterbox``'s :func:`~libreyolo_models.data.letterbox.paste` and
  :func:`~libreyolo_models.data.letterbox.to_network_input`, the functions validation calls
  on its cached images, with the same fill (114), so validation measures the pixels predict
  sees. The resized image is rounded to uint8 like the validation cache's.
- :func:`letterbox` is the CPU reference for one image (float, unrounded): tests hold the
  device path to it within one grey level, on the CPU and on a GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from .letterbox import FILL, letterbox_offset, paste, to_network_input

PAD_VALUE = FILL
RESIZE_CHUNK_BYTES = 64 * 2**20
"""Float32 bytes of source pixels one resize call takes: the resize works in float32 (and the
antialiased kernel on a copy of it), so 32 frames of 720p at once took ~1 GB, more than
YOLOv9-t's whole batch-32 forward; resizing a few at a time computes the same pixels."""


@dataclass(frozen=True)
class LetterboxInfo:
    """How input pixels map back to the original: ``orig = (input - pad) / ratio``."""

    ratio: float
    pad: tuple[float, float]  # (x, y) padding on the left/top, in input pixels
    orig_shape: tuple[int, int]  # (h, w)


def letterbox_geometry(h: int, w: int, imgsz: int) -> tuple[int, int, LetterboxInfo]:
    """Resized ``(new_h, new_w)`` of an ``h x w`` image on an ``imgsz`` square, and its mapping back."""
    ratio = min(imgsz / h, imgsz / w)
    new_h, new_w = max(1, round(h * ratio)), max(1, round(w * ratio))
    left, top = letterbox_offset(new_h, new_w, imgsz)
    return new_h, new_w, LetterboxInfo(ratio, (float(left), float(top)), (h, w))


def letterbox(image: np.ndarray, imgsz: int) -> tuple[torch.Tensor, LetterboxInfo]:
    """RGB uint8 ``[H, W, 3]`` -> float ``[3, imgsz, imgsz]`` in [0, 1] plus the mapping (CPU reference)."""
    h, w = image.shape[:2]
    new_h, new_w, info = letterbox_geometry(h, w, imgsz)
    chw = torch.from_numpy(image if image.flags.writeable else image.copy()).permute(2, 0, 1).float()
    if (new_h, new_w) != (h, w):
        chw = F.interpolate(chw[None], size=(new_h, new_w), mode="bilinear", align_corners=False,
                            antialias=True)[0].clamp_(0, 255)
    left, top = int(info.pad[0]), int(info.pad[1])
    canvas = torch.full((3, imgsz, imgsz), float(PAD_VALUE))
    canvas[:, top:top + new_h, left:left + new_w] = chw
    return canvas.div_(255.0), info


def resize_images(images: Tensor, new_h: int, new_w: int) -> Tensor:
    """``uint8 [N, H, W, 3]`` -> ``uint8 [N, new_h, new_w, 3]``: bilinear, antialiased when shrinking
    (the filter the validation cache's PIL resize uses), rounded to the nearest grey level."""
    if images.shape[1:3] == (new_h, new_w):
        return images
    nchw = images.permute(0, 3, 1, 2).float()
    out = F.interpolate(nchw, size=(new_h, new_w), mode="bilinear", align_corners=False, antialias=True)
    return out.round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1)


def letterbox_batch(images: Sequence[Tensor], imgsz: int, dtype: torch.dtype = torch.float32,
                    orig_shapes: Sequence[tuple[int, int]] | None = None) -> tuple[Tensor, list[LetterboxInfo]]:
    """:func:`letterbox_pixels`, scaled to the network's ``dtype [B, 3, imgsz, imgsz]`` input in
    [0, 1] (``data.letterbox.to_network_input``, as validation scales its cached images)."""
    pixels, infos = letterbox_pixels(images, imgsz, orig_shapes)
    return to_network_input(pixels, dtype), infos


def letterbox_pixels(images: Sequence[Tensor], imgsz: int, orig_shapes: Sequence[tuple[int, int]] | None = None
                     ) -> tuple[Tensor, list[LetterboxInfo]]:
    """Letterbox a batch on the images' device: the device half of predict's preprocessing.

    Images of one size (the frames of a video) are resized together, a few per call
    (``RESIZE_CHUNK_BYTES``), so a batch of frames costs a few resize kernels, not one per frame,
    and no more memory than a few frames in float32. The result stays uint8: predict hands it to
    ``LibreYOLO.inference_forward``, which scales it inside the (graphed) call, so a graph keeps a
    uint8 copy of its input (a quarter of float32's bytes) and the float input lives in its pool.

    Args:
        images: ``uint8 [H, W, 3]`` RGB tensors, all on one device; sizes may differ.
        imgsz: side of the square canvas.
        orig_shapes: per image, the ``(h, w)`` of the picture it shows when it is a reduced
            decode (``data.image_files.read_image_for``); the geometry and the mapping back are the
            picture's, and an image already at its letterbox size is pasted as it is (the
            image cache's pixels, so predict and validation see the same input); one at its DCT
            scale's size (predict on CUDA) is resized here, within a grey level of the cache's
            PIL resize. None: each image is its own picture.

    Returns:
        ``uint8 [B, 3, imgsz, imgsz]`` (a channels-first view of ``[B, imgsz, imgsz, 3]``) on the
        images' device, and per image the mapping back to its pixels.
    """
    if not images:
        raise ValueError("letterbox_pixels() needs at least one image")
    device = images[0].device
    canvas = torch.full((len(images), imgsz, imgsz, 3), FILL, dtype=torch.uint8, device=device)
    infos: list[LetterboxInfo] = []
    groups: dict[tuple[int, int, int, int], list[int]] = {}  # (h, w, new_h, new_w) -> images
    for i, image in enumerate(images):
        size = (int(image.shape[0]), int(image.shape[1]))
        new_h, new_w, info = letterbox_geometry(*(size if orig_shapes is None else orig_shapes[i]), imgsz)
        infos.append(info)
        groups.setdefault((*size, new_h, new_w), []).append(i)
    for (h, w, new_h, new_w), members in groups.items():
        info = infos[members[0]]
        left, top = int(info.pad[0]), int(info.pad[1])
        step = max(1, RESIZE_CHUNK_BYTES // (h * w * 3 * 4))  # images per resize call
        for start in range(0, len(members), step):
            chunk = members[start:start + step]
            resized = resize_images(torch.stack([images[i] for i in chunk]), new_h, new_w)
            if chunk[-1] - chunk[0] == len(chunk) - 1:  # consecutive (a video, a same-size folder): one copy
                canvas[chunk[0]:chunk[-1] + 1, top:top + new_h, left:left + new_w] = resized
                continue
            for j, i in enumerate(chunk):
                paste(canvas[i], resized[j], left, top)
    return canvas.permute(0, 3, 1, 2), infos
