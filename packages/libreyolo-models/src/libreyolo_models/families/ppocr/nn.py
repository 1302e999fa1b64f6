"""The whole PP-OCR network: the detector and the recogniser, each taking RGB in [0, 1].

Paddle's models were trained on OpenCV's BGR pixels normalised to [-1, 1]; both sub-networks flip
and normalise inside, so the graph captures that too and callers hand over our usual RGB images.
"""

from __future__ import annotations

from torch import Tensor, nn

from .angle_net import AngleClassifier
from .db_net import DBDetector
from .svtr_net import SVTRRecognizer


def to_paddle_input(rgb: Tensor) -> Tensor:
    """RGB in [0, 1] -> BGR in [-1, 1] (``(x - 0.5) / 0.5``, RapidOCR's normalisation for both networks)."""
    return (rgb.flip(1) - 0.5) / 0.5


class PPOCRNet(nn.Module):
    """``det``: text probability of every pixel; ``rec``: CTC class probabilities of a line crop;
    ``angle``: whether a line crop is upside down."""

    def __init__(self, classes: int) -> None:
        super().__init__()
        self.det = DBDetector()
        self.rec = SVTRRecognizer(classes)
        self.angle = AngleClassifier()

    def forward(self, images: Tensor) -> Tensor:
        """``[B, 3, H, W]`` RGB in [0, 1], sides multiples of 32 -> probability ``[B, H, W]``."""
        return self.det(to_paddle_input(images))[:, 0]

    def recognize(self, lines: Tensor) -> Tensor:
        """``[N, 3, 48, W]`` RGB in [0, 1] line crops -> ``[N, W / 8, classes]`` probabilities."""
        return self.rec(to_paddle_input(lines))

    def classify_angle(self, lines: Tensor) -> Tensor:
        """``[N, 3, 48, 192]`` RGB in [0, 1] line crops -> ``[N, 2]`` (upright, upside down) probabilities."""
        return self.angle(to_paddle_input(lines))
