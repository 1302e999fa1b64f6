"""Video frames left in planar YUV 4:2:0 for the device to turn into RGB (predict on CUDA).

FFmpeg decodes a video on its own threads, but converting each frame to an RGB array (swscale,
``VideoFrame.to_ndarray("rgb24")``) runs on the thread that reads it and halved the 1080p frames a
host could feed: 301 frames/s decoded alone against 144 with the conversion, 329 taking the planar
array as it is (``tools/probe_video_decode.py``, the development machine). So on CUDA a yuv420p
frame travels as its planes (half the bytes of RGB to copy, pin and upload), copied once from the
decoder's buffers into predict's pinned batch buffer, and a batch becomes RGB on the device in a
few calls, just before the letterbox; ``Results.orig_img`` is converted on the host, by the same
swscale call on the same decoded frame as before, only when something reads it. (On the H200
machine, 1080p frames went through predict at 371/s converting on the host and 504/s this way,
half+fuse+graph, one 10-s video, one process: ``probe_video_decode.py --predict``, 2026-12-05.)

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
    """One video frame as its yuv420p planes, read where the decoder left them.

    Attributes:
        frame: the decoded ``av.VideoFrame`` (its planes are copied once, straight into predict's
            pinned batch buffer: ``copy_into``), or the planes already as an array (``planes``'
            layout; what a pickled frame becomes).
        orig_shape: the frame's ``(H, W)``.
    """

    frame: Any
    orig_shape: tuple[int, int]

    @property
    def shape(self) -> tuple[int, int, int]:
        """The staged layout's shape: ``planes`` with a trailing dimension of 1 (``copy_into``)."""
        height, width = self.orig_shape
        return height * 3 // 2, width, 1

    @property
    def planes(self) -> np.ndarray:
        """``uint8 [H * 3 / 2, W]``: the H rows of Y, then U and V (``H/2 x W/2`` each, laid out
        two of their rows per row), as ``VideoFrame.to_ndarray("yuv420p")`` gives them."""
        if isinstance(self.frame, np.ndarray):
            return self.frame
        out = np.empty(self.shape[:2], np.uint8)
        self.copy_into(out)
        return out

    def copy_into(self, out: np.ndarray) -> None:
        """Write ``planes`` into ``out`` (``uint8``, ``planes``' shape or ``shape``): one copy of each
        plane from the decoder's buffer, skipping its row padding."""
        height, width = self.orig_shape
        if not out.flags.c_contiguous:  # reshape would copy, and the planes would land in the copy
            raise ValueError(f"copy_into needs a contiguous buffer, got strides {out.strides}")
        flat = out.reshape(-1)
        if isinstance(self.frame, np.ndarray):
            flat[:] = self.frame.reshape(-1)
            return
        luma, quarter = height * width, (height // 2) * (width // 2)
        targets = (flat[:luma].reshape(height, width), flat[luma:luma + quarter].reshape(height // 2, width // 2),
                   flat[luma + quarter:].reshape(height // 2, width // 2))
        for target, plane in zip(targets, self.frame.planes):
            rows, cols = target.shape
            source = np.frombuffer(plane, np.uint8).reshape(-1, plane.line_size)[:rows, :cols]
            np.copyto(target, source)

    def full(self) -> np.ndarray:
        """The frame as RGB uint8 ``[H, W, 3]``: swscale's conversion, the host path's pixels."""
        if isinstance(self.frame, np.ndarray):
            import av

            return av.VideoFrame.from_ndarray(self.frame, format=PLANAR_FORMAT).to_ndarray(format="rgb24")
        return self.frame.to_ndarray(format="rgb24")

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its planes (a decoder's frame does not pickle)."""
        return PlanarFrame, (self.planes, self.orig_shape)


def planar_frame(frame: Any) -> PlanarFrame | None:
    """A decoded PyAV frame kept planar, or None where it converts on the host (another pixel
    format, an odd width or height, which 4:2:0 chroma cannot split evenly, or planes stored
    bottom-up, which ``copy_into`` does not read)."""
    height, width = frame.height, frame.width
    if frame.format.name != PLANAR_FORMAT or height % 2 or width % 2:
        return None
    if any(plane.line_size <= 0 for plane in frame.planes):
        return None
    return PlanarFrame(frame, (height, width))


def planar_to_rgb(planes: Tensor, shape: tuple[int, int]) -> Tensor:
    """``uint8`` yuv420p planes (``[H * 3 / 2, W]``, or with a trailing dimension of 1, or a batch of
    them: ``[N, H * 3 / 2, W(, 1)]``) -> RGB ``uint8 [(N,) H, W, 3]`` on the planes' device, as swscale
    converts them (see the module docstring). A batch costs the kernels of one frame."""
    height, width = shape
    batched = planes.dim() == 4 or (planes.dim() == 3 and planes.shape[-1] != 1)
    flat = planes.reshape(-1, height * 3 // 2, width)
    chroma = flat[:, height:].reshape(-1, 2, height // 2, width // 2)  # U then V, contiguous after Y
    luma = (flat[:, :height].float() - 16.0) * _Y_SCALE
    u, v = (chroma.float() - 128.0).repeat_interleave(2, 2).repeat_interleave(2, 3).unbind(1)
    rgb = torch.stack((luma + _R_FROM_V * v, luma - _G_FROM_U * u - _G_FROM_V * v, luma + _B_FROM_U * u), dim=-1)
    out = rgb.floor_().clamp_(0.0, 255.0).to(torch.uint8)
    return out if batched else out[0]


__all__ = ["PLANAR_FORMAT", "PlanarFrame", "planar_frame", "planar_to_rgb"]
