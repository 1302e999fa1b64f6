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

What changes for a user: the network's pixels. swscale's conversion (the colour matrix and range
the frame is tagged with, BT.601 in video range when it says nothing; each chroma sample covering
its 2 x 2 pixels; results truncated) is rebuilt here in float32; on the bench's 1080p video the two
differ by 2 grey levels at most, 0.67 on average, before the letterbox averages them further. The
tags followed are BT.601 (and unspecified) and BT.709, video or full range (PyAV 17 on: before, its
host conversion took every yuv420p frame as BT.601 in video range, and so does the device); frames
tagged otherwise (FCC, SMPTE 240M, BT.2020), other pixel formats (``yuvj420p``, 4:2:2, 10-bit) and
odd frame sizes convert on the host as before (a tag FFmpeg cannot convert at all fails there, as
on the CPU).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

PLANAR_FORMAT = "yuv420p"
"""The pixel format left planar; every other one is converted to RGB on the host."""

# The conversion swscale makes of a frame (PyAV's to_ndarray("rgb24") hands it the frame's tags):
# its colour matrix by the colorspace tag, as (V to R, U to G, V to G, U to B), and the range by
# the color_range tag. Unspecified and the BT.601 family take BT.601, as swscale does; frames tagged
# otherwise (FCC, SMPTE 240M, BT.2020, RGB) convert on the host.
_BT601 = (1.402, 0.344136, 0.714136, 1.772)
_BT709 = (1.5748, 0.1873, 0.4681, 1.8556)
_MATRICES = {1: _BT709, 2: _BT601, 5: _BT601, 6: _BT601}  # AVColorSpace: BT709, UNSPECIFIED, BT470BG, SMPTE170M
_FULL_RANGE = {0: False, 1: False, 2: True}  # AVColorRange: UNSPECIFIED and MPEG (video range), JPEG (full)
UNTAGGED = (2, 0)
"""``(colorspace, color_range)`` of a frame that says nothing: BT.601 in video range."""


@dataclass(frozen=True, eq=False)
class PlanarFrame:
    """One video frame as its yuv420p planes, read where the decoder left them.

    Attributes:
        frame: the decoded ``av.VideoFrame`` (its planes are copied once, straight into predict's
            pinned batch buffer: ``copy_into``), or the planes already as an array (``planes``'
            layout; what a pickled frame becomes).
        orig_shape: the frame's ``(H, W)``.
        colour: the frame's ``(colorspace, color_range)`` tags (FFmpeg's numbers), which choose
            the conversion (``planar_to_rgb``) as they choose swscale's.
    """

    frame: Any
    orig_shape: tuple[int, int]
    colour: tuple[int, int] = UNTAGGED

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

            frame = av.VideoFrame.from_ndarray(self.frame, format=PLANAR_FORMAT)
            if self.colour != UNTAGGED:  # tags only ever recorded where the host conversion follows them
                frame.colorspace, frame.color_range = self.colour
            return frame.to_ndarray(format="rgb24")
        return self.frame.to_ndarray(format="rgb24")

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its planes and tags (a decoder's frame does not pickle)."""
        return PlanarFrame, (self.planes, self.orig_shape, self.colour)


def planar_frame(frame: Any) -> PlanarFrame | None:
    """A decoded PyAV frame kept planar, or None where it converts on the host (another pixel
    format, an odd width or height, which 4:2:0 chroma cannot split evenly, planes stored
    bottom-up, which ``copy_into`` does not read, or colour tags ``planar_to_rgb`` does not follow)."""
    height, width = frame.height, frame.width
    if frame.format.name != PLANAR_FORMAT or height % 2 or width % 2:
        return None
    if any(plane.line_size <= 0 for plane in frame.planes):
        return None
    colour = (int(frame.colorspace), int(frame.color_range)) if _host_follows_tags() else UNTAGGED
    if colour[0] not in _MATRICES or colour[1] not in _FULL_RANGE:
        return None
    return PlanarFrame(frame, (height, width), colour)


@functools.cache
def _host_follows_tags() -> bool:
    """Whether PyAV's host conversion follows a frame's colour tags: from PyAV 17 (its
    ``sws_scale_frame``); before, every yuv420p frame converted as BT.601 in video range, whatever
    its tags, and so does the device then."""
    import av

    try:
        return int(av.__version__.split(".")[0]) >= 17
    except ValueError:
        return True


def planar_to_rgb(planes: Tensor, shape: tuple[int, int], colour: tuple[int, int] = UNTAGGED) -> Tensor:
    """``uint8`` yuv420p planes (``[H * 3 / 2, W]``, or with a trailing dimension of 1, or a batch of
    them: ``[N, H * 3 / 2, W(, 1)]``) -> RGB ``uint8 [(N,) H, W, 3]`` on the planes' device, as swscale
    converts them with the frames' ``colour`` tags (``PlanarFrame.colour``; see the module
    docstring). A batch costs the kernels of one frame."""
    height, width = shape
    v_r, u_g, v_g, u_b = _MATRICES[colour[0]]
    if _FULL_RANGE[colour[1]]:  # Y and chroma over 0-255
        y_offset, y_scale = 0.0, 1.0
    else:  # Y 16-235, chroma 16-240, stretched to 0-255
        y_offset, y_scale = 16.0, 255.0 / 219.0
        v_r, u_g, v_g, u_b = (k * 255.0 / 224.0 for k in (v_r, u_g, v_g, u_b))
    batched = planes.dim() == 4 or (planes.dim() == 3 and planes.shape[-1] != 1)
    flat = planes.reshape(-1, height * 3 // 2, width)
    chroma = flat[:, height:].reshape(-1, 2, height // 2, width // 2)  # U then V, contiguous after Y
    luma = (flat[:, :height].float() - y_offset) * y_scale
    u, v = (chroma.float() - 128.0).repeat_interleave(2, 2).repeat_interleave(2, 3).unbind(1)
    rgb = torch.stack((luma + v_r * v, luma - u_g * u - v_g * v, luma + u_b * u), dim=-1)
    out = rgb.floor_().clamp_(0.0, 255.0).to(torch.uint8)
    return out if batched else out[0]


__all__ = ["PLANAR_FORMAT", "UNTAGGED", "PlanarFrame", "planar_frame", "planar_to_rgb"]
