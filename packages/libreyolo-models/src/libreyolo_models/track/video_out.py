"""Writing annotated frames of one source to a video file (PyAV, the optional ``[video]`` extra)."""

from __future__ import annotations

import logging
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError

log = logging.getLogger(__name__)


class VideoOut:
    """An ``.mp4`` written frame by frame; the size is taken from the first frame (the codec
    needs even sides, so odd ones are cropped by a pixel)."""

    def __init__(self, path: Path, fps: float = 30.0) -> None:
        try:
            import av
        except ImportError:
            raise ConfigError("saving a tracked video needs PyAV: pip install 'libreyolo-models[video]'") from None
        self.path = path
        self._av = av
        self._fps = Fraction(fps).limit_denominator(1000)
        self._container: Any = None
        self._stream: Any = None
        self.frames = 0

    def write(self, frame: np.ndarray) -> None:
        """Append one RGB uint8 ``[H, W, 3]`` frame."""
        h, w = frame.shape[0] // 2 * 2, frame.shape[1] // 2 * 2
        if self._container is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._container = self._av.open(str(self.path), mode="w")
            self._stream = self._container.add_stream("mpeg4", rate=self._fps)
            self._stream.width, self._stream.height, self._stream.pix_fmt = w, h, "yuv420p"
        image = self._av.VideoFrame.from_ndarray(np.ascontiguousarray(frame[:h, :w]), format="rgb24")
        for packet in self._stream.encode(image):
            self._container.mux(packet)
        self.frames += 1

    def close(self) -> None:
        """Flush the encoder and finish the file (safe to call twice)."""
        if self._container is not None:
            for packet in self._stream.encode():
                self._container.mux(packet)
            self._container.close()
            self._container = None
            log.info("tracked video saved to %s (%d frames)", self.path, self.frames)
