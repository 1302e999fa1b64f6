"""Video frames left in planar YUV 4:2:0 for the device to turn into RGB (predict on CUDA).

FFmpeg decodes a video on its own threads, but converting each frame to an RGB array (swscale,
``VideoFrame.to_ndarray("rgb24")``) runs on the thread that reads it and halved the 1080p frames a
host could feed: 301 frames/s decoded alone against 144 with the conversion, 329 taking the planar
array as it is (``tools/probe_video_decode.py``, the development machine). So on CUDA a yuv420p
frame travels as its planes (half the bytes of RGB to copy, pin and upload) and becomes RGB on
the device, just before the letterbox; ``Results.orig_img`` is converted on the host, by the same
swscale call as before, only when something reads it.

What changes for a user: the network's pixels. swscale's conversion (BT.601 coefficients, video
range, each chroma sample covering its 2 x 2 pixels, results truncated: what PyAV applies when a
stream does not say otherwise) is rebuilt here in float32; on the bench's 1080p video the two
differ by 2 grey levels at most, 0.67 on average, before the letterbox averages them further.
Other pixel formats (full-range ``yuvj420p``, 4:2:2, 10-bit) and odd frame sizes convert on the
host as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

PLANAR_FORMAT = "yuv420p"
"""The pixel format left planar; every other one is converted to RGB on the host."""

# BT.601 in video range (Y 16-235, chroma 16-240), scaled to 0-255 RGB.
_Y_SCALE = 255.0 / 219.0
_R_FROM_V = 1.402 * 255.0 / 224.0
_G_FROM_U = 0.344136 * 255.0 / 224.0
_G_FROM_V = 0.714136 * 255.0 / 224.0
_B_FROM_U = 1.772 * 255.0 / 224.0


@dataclass(frozen=True, eq=False)
class PlanarFrame:
    """One video frame as its yuv420p planes.

    Attributes:
        planes: ``uint8 [H * 3 / 2, W]``: the H rows of Y, then U and V (``H/2 x W/2`` each, laid
            out two of their rows per row), as ``VideoFrame.to_ndarray("yuv420p")`` gives them.
        orig_shape: the frame's ``(H, W)``.
    """

    planes: np.ndarray
    orig_shape: tuple[int, int]

    def full(self) -> np.ndarray:
        """The frame as RGB uint8 ``[H, W, 3]``: swscale's conversion, the host path's pixels."""
        import av

        return av.VideoFrame.from_ndarray(self.planes, format=PLANAR_FORMAT).to_ndarray(format="rgb24")


def planar_frame(frame: Any) -> PlanarFrame | None:
    """A decoded PyAV frame kept planar, or None where it converts on the host (another pixel
    format, or an odd width or height, which 4:2:0 chroma cannot split evenly)."""
    height, width = frame.height, frame.width
    if frame.format.name != PLANAR_FORMAT or height % 2 or width % 2:
        return None
    return PlanarFrame(frame.to_ndarray(format=PLANAR_FORMAT), (height, width))


def planar_to_rgb(planes: Tensor, shape: tuple[int, int]) -> Tensor:
    """``uint8`` yuv420p planes (``[H * 3 / 2, W]``, or with a trailing dimension of 1) -> RGB
    ``uint8 [H, W, 3]`` on the planes' device, as swscale converts them (see the module docstring)."""
    height, width = shape
    flat = planes.reshape(height * 3 // 2, width)
    chroma = flat[height:].reshape(2, height // 2, width // 2)  # U then V, contiguous after Y
    luma = (flat[:height].float() - 16.0) * _Y_SCALE
    u, v = (chroma.float() - 128.0).repeat_interleave(2, 1).repeat_interleave(2, 2)
    rgb = torch.stack((luma + _R_FROM_V * v, luma - _G_FROM_U * u - _G_FROM_V * v, luma + _B_FROM_U * u), dim=-1)
    return rgb.floor_().clamp_(0.0, 255.0).to(torch.uint8)


__all__ = ["PLANAR_FORMAT", "PlanarFrame", "planar_frame", "planar_to_rgb"]
