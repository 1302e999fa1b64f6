"""The part of the family contract the DETR families share (RT-DETR, and the fixed-size RT-DETRv2,
D-FINE, DEIM, RT-DETRv4, DEIMv2): seams, the denoising training head, loss caching,
post-processing, optimizer groups, checkpoint tolerance for another size's anchor buffers, and
the query count.

A family subclasses ``DETRFamily`` and says how to build its network (``build_network``, for
``self.imgsz``), how to build its loss (``make_loss``), where a bare state dict tells its size
(``infer_size``), and its backbone learning-rate multiplier. Networks follow one shape:
``features(images)`` (backbone + encoder: the captured training prefix), ``forward(images)``
(inference) and ``forward_train(features, denoising)`` (the eager decoder), with the decoder at
``net.decoder`` holding ``num_queries``.

Training is split like RT-DETR's: ``training_forward`` (backbone + encoder) is what a CUDA graph
may capture; ``training_head`` runs the decoder eagerly with this batch's denoising queries.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from ..errors import CheckpointError, ConfigError
from ..layers.detr.denoising import DenoisingQueries, build_denoising
from ..layers.set_postprocess import topk_detections
from ..layers.set_targets import GroupedTargets, group_targets
from ..layers.targets import random_box_targets
from .family import NORM_TYPES, Family, LossContext, LossResult
from .spec import FamilySpec

LossFn = Callable[..., tuple[Tensor, Tensor]]
"""``loss(outputs, grouped_targets, denoising, *, normalizer_sum, world_size) -> (total, items)``."""

# Buffers that are a function of the built input size, not learned: a checkpoint built for
# another size brings its own, which this model replaces with its own (see AnchorBuffers).
SIZE_BUFFERS = ("decoder.anchors", "decoder.valid_mask")

NUM_DENOISING = 100       # about this many denoising queries per batch (upstream's configs)
LABEL_NOISE_RATIO = 0.5   # half of this share of denoising labels is flipped to a random class
BOX_NOISE_SCALE = 1.0     # corners move by up to one half-extent (negatives: one to two)


def as_hw(imgsz: int | tuple[int, int] | list[int], stride: int = 32) -> tuple[int, int]:
    """``640`` or ``(H, W)`` -> ``(H, W)``, each a positive multiple of ``stride``."""
    hw = (imgsz, imgsz) if isinstance(imgsz, int) else tuple(imgsz)
    if len(hw) != 2 or any(isinstance(v, bool) or not isinstance(v, int) or v <= 0 or v % stride for v in hw):
        raise ConfigError(f"imgsz={imgsz!r} must be a positive multiple of {stride}, or (height, width) of such "
                          f"multiples, e.g. 640 or (384, 640)")
    return int(hw[0]), int(hw[1])


class DETRFamily(Family):
    """Shared implementation (see the module docstring)."""

    training_head_note = (
        "the decoder and the loss stay eager: its contrastive denoising queries are built from each batch's "
        "boxes, so its token count changes from batch to batch and no graph can hold it (backbone + "
        "encoder are captured)")

    imgsz: tuple[int, int]  # always set: the built size (H, W), the declared default when not given

    backbone_lr_scale: ClassVar[float | Mapping[str, float]] = 1.0
    """The backbone's learning-rate multiplier (``lr_scale`` of its groups), or one per size."""
    abs_box_sizes: ClassVar[bool] = True
    """Denoising boxes whose noised corners crossed keep a positive size (D-FINE's families)."""

    def __init__(self, spec: FamilySpec, size: str, task: str, nc: int,
                 imgsz: int | tuple[int, int] | None = None) -> None:
        super().__init__(spec, size, task, nc)
        self.imgsz = as_hw(imgsz if imgsz is not None else spec.default_imgsz(size, task), spec.stride)
        self._loss: tuple[tuple[float, ...], LossFn] | None = None

    # ------------------------------------------------------------------ building
    @abc.abstractmethod
    def make_loss(self, gains: Mapping[str, float]) -> LossFn:
        """The family's loss with these term gains."""

    @classmethod
    def infer_nc(cls, state: Mapping[str, Tensor], task: str) -> int:
        key = "decoder.dec_score_head.0.weight"
        if key not in state:
            raise CheckpointError(f"not a DETR detection state dict: {key!r} is missing")
        return int(state[key].shape[0])

    def check_state(self, net: nn.Module, state: Mapping[str, Tensor], source: str) -> None:
        """As the default, except that anchor buffers built for another input size are accepted
        (the decoder keeps its own; they are a function of the size, not learned)."""
        own = net.state_dict()
        same = {k: (own[k] if k in SIZE_BUFFERS and k in own else v) for k, v in state.items()}
        super().check_state(net, same, source)

    # ------------------------------------------------------------------ graph seams
    def inference_forward(self, net: nn.Module, images: Tensor) -> Tensor:
        """``[B, 3, H, W]`` -> ``[B, Q, 4 + nc]``: xyxy boxes in input pixels, sigmoid scores."""
        out = net(images)
        h, w = images.shape[-2:]
        cx, cy, bw, bh = out["pred_boxes"].unbind(-1)
        boxes = torch.stack(((cx - bw / 2) * w, (cy - bh / 2) * h, (cx + bw / 2) * w, (cy + bh / 2) * h), -1)
        return torch.cat((boxes, out["pred_logits"].sigmoid()), -1)

    def training_forward(self, net: nn.Module, images: Tensor) -> list[Tensor]:
        """The captured prefix: backbone + encoder -> their maps (nothing depends on the targets)."""
        return net.features(images)  # type: ignore[operator]

    def training_head(self, net: nn.Module, outputs: list[Tensor], targets: Tensor) -> dict[str, Any]:
        """The eager remainder's network part: the decoder with this batch's denoising queries."""
        grouped = group_targets(targets, int(outputs[0].shape[0]), self.nc)
        # The noise comes from torch's global CPU generator: seeded per rank by the trainer, and
        # restored by graph capture around its warmup, so eager and graphed runs draw the same.
        decoder: Any = net.decoder
        denoising = build_denoising(grouped, self.nc, int(decoder.num_queries), num_denoising=NUM_DENOISING,
                                    label_noise_ratio=LABEL_NOISE_RATIO, box_noise_scale=BOX_NOISE_SCALE,
                                    abs_sizes=self.abs_box_sizes).to(outputs[0].device)
        head = net.forward_train(outputs, denoising)  # type: ignore[operator]
        return {**head, "targets": grouped, "denoising": denoising}

    def compute_loss(self, outputs: Mapping[str, Any], targets: Tensor, ctx: LossContext) -> LossResult:
        """Matching and the terms over ``training_head``'s outputs (which carry the grouped targets)."""
        if not isinstance(outputs, Mapping) or "denoising" not in outputs:
            raise TypeError(f"{self.spec.display_name}'s compute_loss reads the training head's outputs: call "
                            "training_head(net, training_forward(net, images), targets) first")
        decl = self.spec.task(self.task)
        gains = {**decl.loss_gains, **ctx.gains}
        key = tuple(float(gains[name]) for name in decl.loss_names)
        if self._loss is None or self._loss[0] != key:
            self._loss = (key, self.make_loss(gains))
        grouped: GroupedTargets = outputs["targets"]
        denoising: DenoisingQueries = outputs["denoising"]
        total, items = self._loss[1](outputs, grouped, denoising, normalizer_sum=ctx.normalizer_sum,
                                     world_size=ctx.world_size, **self.loss_options(ctx))
        return LossResult(total, items)

    def loss_options(self, ctx: LossContext) -> dict[str, Any]:
        """Extra keyword arguments of this family's loss from the context (default: none)."""
        return {}

    def postprocess(self, outputs: Tensor, options: Any) -> list[Tensor]:
        """Top ``max_det`` (query, class) pairs per image above ``conf``; no NMS (``iou`` and
        ``agnostic`` do not apply to a set predictor)."""
        return topk_detections(outputs, conf=options.conf, max_det=options.max_det, classes=options.classes)

    def sample_targets(self, batch: int, imgsz: int, generator: torch.Generator) -> Tensor:
        return random_box_targets(batch, self.nc, generator)

    # ------------------------------------------------------------------ training hooks
    def set_num_queries(self, net: nn.Module, num_queries: int) -> None:
        """Select ``num_queries`` queries from the encoder from now on (the weights do not change)."""
        if isinstance(num_queries, bool) or not isinstance(num_queries, int) or num_queries < 1:
            raise ConfigError(f"num_queries={num_queries!r} must be a positive number of decoder queries "
                              f"({self.spec.display_name}'s default: {net.decoder.num_queries})")  # type: ignore[union-attr]
        net.decoder.num_queries = num_queries  # type: ignore[union-attr]

    def parameter_groups(self, net: nn.Module, *, weight_decay: float) -> list[dict[str, Any]]:
        """Backbone at its ``lr_scale``; no decay on norms, biases and one-number scales (the
        backbone's learnable affines, RMSNorm scales). No group is named ``bias``, so no warmup
        starts from ``warmup_bias_lr``."""
        scale = self.backbone_lr_scale
        lr_scale = float(scale[self.size] if isinstance(scale, Mapping) else scale)
        buckets: dict[tuple[bool, bool], list[nn.Parameter]] = {(b, d): [] for b in (True, False) for d in (True, False)}
        for module_name, module in net.named_modules():
            backbone = module_name == "backbone" or module_name.startswith("backbone.")
            for name, param in module.named_parameters(recurse=False):
                if param.requires_grad:
                    decays = not (name.endswith("bias") or name == "scale" or isinstance(module, NORM_TYPES))
                    buckets[(backbone, decays)].append(param)
        groups = []
        for (backbone, decays), params in buckets.items():
            group: dict[str, Any] = {"params": params, "weight_decay": weight_decay if decays else 0.0,
                                     "group": ("backbone" if backbone else "head") + ("" if decays else "_no_decay")}
            if backbone and lr_scale != 1.0:
                group["lr_scale"] = lr_scale
            groups.append(group)
        return groups
