"""The part of the family contract every box detector shares, written once.

A detector family subclasses ``DetectorFamily`` and says: how to build its network, where its
class outputs are (``head_key``: the class count is read from it and ``train(pretrained=...)``
leaves it fresh), how to make its loss for a set of gains (``make_loss``), and, where they differ
from the defaults below, its seams and post-processing. What it no longer writes: the
``infer_nc`` check, the loss object cached per gains, the gains merge (``LossContext.gains``
already holds the resolved gains), NMS post-processing and the parity tool's sample targets.

Defaults, for a dense detector whose network returns ``{"predictions": [B, 4 + nc, A]}`` in eval
(xyxy boxes in input pixels, then class scores in [0, 1]) and ``raw_outputs(images)`` for training:

- ``inference_forward``: ``net(images)["predictions"]``;
- ``training_forward``: ``net.raw_outputs(images)``;
- ``postprocess``: class-aware NMS per image (``layers.nms.nms_per_image``), ``float [N, 6]`` rows
  (x1, y1, x2, y2, score, class);
- ``sample_targets``: random boxes in the detection target schema (``layers.targets``).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from ..errors import CheckpointError
from ..layers.nms import nms_per_image
from ..layers.targets import random_box_targets
from .family import Family, LossContext, LossResult, TensorTree

LossFn = Callable[..., Any]
"""A family's loss object: called by its ``compute_loss`` with the outputs and targets."""


class DetectorFamily(Family):
    """Shared implementation of box detectors; subclasses set ``head_key`` and implement
    ``build_network``, ``make_loss`` and ``compute_loss``."""

    head_key: ClassVar[str]
    """State-dict key of the class-output weight, whose first dimension is the class count."""

    head_extra_classes: ClassVar[int] = 0
    """Rows of ``head_key`` beyond the ``nc`` classes (a background / no-object row: 1)."""

    _loss_cache: tuple[tuple[tuple[str, float], ...], LossFn] | None = None

    @classmethod
    def infer_nc(cls, state: Mapping[str, Tensor], task: str) -> int:
        if cls.head_key not in state:
            raise CheckpointError(f"not a {cls.__name__.removesuffix('Family')} {task} state dict: "
                                  f"{cls.head_key!r} is missing")
        return int(state[cls.head_key].shape[0]) - cls.head_extra_classes

    # ------------------------------------------------------------------ loss
    @abc.abstractmethod
    def make_loss(self, gains: Mapping[str, float]) -> LossFn:
        """A loss object for these resolved gains (one per distinct set; cached by ``loss_for``)."""

    def loss_for(self, ctx: LossContext) -> LossFn:
        """The loss object for ``ctx.gains`` (the resolved gains: family defaults, then the
        user's), made once per distinct set of gains."""
        key = tuple(sorted((name, float(value)) for name, value in ctx.gains.items()))
        if self._loss_cache is None or self._loss_cache[0] != key:
            gains = {**self.spec.task(self.task).loss_gains, **dict(key)}
            self._loss_cache = (key, self.make_loss(gains))
        return self._loss_cache[1]

    @abc.abstractmethod
    def compute_loss(self, outputs: Any, targets: Any, ctx: LossContext) -> LossResult:
        """Calls ``self.loss_for(ctx)`` with the outputs and targets (and whatever of ``ctx`` its
        loss reads: epoch, ``normalizer_sum``, world size)."""

    # ------------------------------------------------------------------ seams and outputs
    def inference_forward(self, net: nn.Module, images: Tensor) -> TensorTree:
        """``[B, 3, H, W]`` -> ``predictions [B, 4 + nc, A]`` (all NMS needs)."""
        return net(images)["predictions"]

    def training_forward(self, net: nn.Module, images: Tensor) -> Any:
        """The network half the loss reads: raw head maps, nothing data-dependent."""
        return net.raw_outputs(images)  # type: ignore[operator]

    def postprocess(self, outputs: Tensor, options: Any) -> list[Tensor]:
        """Class-aware NMS per image over ``[B, 4 + nc, A]`` -> ``float [N, 6]`` per image."""
        return nms_per_image(outputs.float(), conf=options.conf, iou=options.iou, max_det=options.max_det,
                             classes=options.classes, agnostic=options.agnostic)

    def sample_targets(self, batch: int, imgsz: int, generator: torch.Generator) -> Tensor:
        return random_box_targets(batch, self.nc, generator)
