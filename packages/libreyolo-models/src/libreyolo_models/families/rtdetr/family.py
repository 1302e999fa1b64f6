"""RT-DETR's implementation of the family contract: network, graph seams, denoising head, loss,
post-processing and its optimizer groups."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ...contract import NORM_TYPES, Family, LossContext, LossResult
from ...errors import CheckpointError, ConfigError
from ...family_spec import FamilySpec
from ...layers.detr.denoising import build_denoising
from ...layers.detr.postprocess import postprocess
from ...layers.detr.rtdetr_sizes import BOX_NOISE_SCALE, LABEL_NOISE_RATIO, NUM_DENOISING, NUM_QUERIES
from ...layers.detr.set_loss import LOSS_NAMES, RTDETRLoss
from ...layers.detr.targets import group_targets
from ...layers.targets import random_box_targets
from .nn import RTDETRNet

BACKBONE_LR_SCALE = 0.1  # the official recipe trains the backbone at a tenth of the base rate


class RTDETRFamily(Family):
    """RT-DETR detect, sizes r18/r34/r50/r50m/r101/l/x.

    Training is split: ``training_forward`` (backbone + encoder) is what a CUDA graph may
    capture; ``training_head`` runs the decoder eagerly with this batch's denoising queries.
    """

    training_head_note = (
        "the decoder and the loss stay eager: its contrastive denoising queries are built from each batch's "
        "boxes, so its token count changes from batch to batch and no graph can hold it (backbone + "
        "encoder are captured)")

    def __init__(self, spec: FamilySpec, size: str, task: str, nc: int) -> None:
        super().__init__(spec, size, task, nc)
        self._loss: tuple[tuple[float, ...], RTDETRLoss] | None = None

    def build_network(self) -> nn.Module:
        return RTDETRNet(self.size, self.nc)

    @classmethod
    def infer_nc(cls, state: Mapping[str, Tensor], task: str) -> int:
        key = "decoder.enc_score_head.weight"
        if key not in state:
            raise CheckpointError(f"not an RT-DETR detection state dict: {key!r} is missing")
        return int(state[key].shape[0])

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        """Bare state dicts carry no metadata; the backbone's blocks and the widths tell the size."""
        width_key = "encoder.input_proj.0.0.weight"
        if width_key not in state:
            return None
        wide = int(state[width_key].shape[0]) == 384
        if any(k.startswith("backbone.stages.") for k in state):
            return "x" if wide else "l"
        if wide:
            return "r101"
        if any(".branch2c." in k for k in state):
            half = state.get("encoder.fpn_blocks.0.conv1.conv.weight")
            return "r50m" if half is not None and int(half.shape[0]) == 128 else "r50"
        return "r34" if "backbone.res_layers.0.blocks.2.branch2a.conv.weight" in state else "r18"

    # Graph seams -------------------------------------------------------------------------
    def inference_forward(self, net: nn.Module, images: Tensor) -> Tensor:
        """``[B, 3, H, W]`` -> ``[B, 300, 4 + nc]``: xyxy boxes in input pixels, sigmoid scores."""
        out = net(images)
        h, w = images.shape[-2:]
        cx, cy, bw, bh = out["pred_boxes"].unbind(-1)
        boxes = torch.stack(((cx - bw / 2) * w, (cy - bh / 2) * h, (cx + bw / 2) * w, (cy + bh / 2) * h), -1)
        return torch.cat((boxes, out["pred_logits"].sigmoid()), -1)

    def training_forward(self, net: nn.Module, images: Tensor) -> list[Tensor]:
        """The captured prefix: backbone + encoder -> three maps (nothing depends on the targets)."""
        return net.features(images)  # type: ignore[operator]

    def training_head(self, net: nn.Module, outputs: list[Tensor], targets: Tensor) -> dict[str, Any]:
        """The eager remainder's network part: the decoder with this batch's denoising queries."""
        grouped = group_targets(targets, int(outputs[0].shape[0]), self.nc)
        # The noise comes from torch's global CPU generator: seeded per rank by the trainer, and
        # restored by graph capture around its warmup, so eager and graphed runs draw the same.
        num_queries = int(net.decoder.num_queries)  # type: ignore[union-attr, arg-type]
        denoising = build_denoising(grouped, self.nc, num_queries, num_denoising=NUM_DENOISING,
                                    label_noise_ratio=LABEL_NOISE_RATIO,
                                    box_noise_scale=BOX_NOISE_SCALE).to(outputs[0].device)
        head = net.forward_train(outputs, denoising)  # type: ignore[operator]
        return {**head, "targets": grouped, "denoising": denoising}

    def compute_loss(self, outputs: Mapping[str, Any], targets: Tensor, ctx: LossContext) -> LossResult:
        """Matching and the terms over ``training_head``'s outputs (which carry the grouped targets)."""
        if not isinstance(outputs, Mapping) or "denoising" not in outputs:
            raise TypeError("RT-DETR's compute_loss reads the training head's outputs: call "
                            "training_head(net, training_forward(net, images), targets) first")
        gains = {**self.spec.task(self.task).loss_gains, **ctx.gains}
        key = tuple(float(gains[name]) for name in LOSS_NAMES)
        if self._loss is None or self._loss[0] != key:
            self._loss = (key, RTDETRLoss(self.nc, gains))
        total, items = self._loss[1](outputs, outputs["targets"], outputs["denoising"],
                                     normalizer_sum=ctx.normalizer_sum, world_size=ctx.world_size)
        return LossResult(total, items)

    def postprocess(self, outputs: Tensor, options: Any) -> list[Tensor]:
        """Top ``max_det`` (query, class) pairs per image above ``conf``; no NMS (``iou`` and
        ``agnostic`` do not apply to a set predictor)."""
        return postprocess(outputs, conf=options.conf, max_det=options.max_det, classes=options.classes)

    def sample_targets(self, batch: int, imgsz: int, generator: torch.Generator) -> Tensor:
        return random_box_targets(batch, self.nc, generator)

    # Training hooks ------------------------------------------------------------------------
    def set_num_queries(self, net: nn.Module, num_queries: int) -> None:
        """Select ``num_queries`` queries from the encoder from now on (the weights do not change)."""
        if isinstance(num_queries, bool) or not isinstance(num_queries, int) or num_queries < 1:
            raise ConfigError(f"num_queries={num_queries!r} must be a positive number of decoder queries "
                              f"(RT-DETR's default: {NUM_QUERIES})")
        net.decoder.num_queries = num_queries  # type: ignore[union-attr]

    def parameter_groups(self, net: nn.Module, *, weight_decay: float) -> list[dict[str, Any]]:
        """Backbone at ``lr_scale`` 0.1; no decay on norms and biases (attention's ``in_proj_bias``
        included). No group is named ``bias``, so no warmup starts from ``warmup_bias_lr``."""
        buckets: dict[tuple[bool, bool], list[nn.Parameter]] = {(b, d): [] for b in (True, False) for d in (True, False)}
        for module_name, module in net.named_modules():
            backbone = module_name == "backbone" or module_name.startswith("backbone.")
            for name, param in module.named_parameters(recurse=False):
                if param.requires_grad:
                    decays = not (name.endswith("bias") or isinstance(module, NORM_TYPES))
                    buckets[(backbone, decays)].append(param)
        groups = []
        for (backbone, decays), params in buckets.items():
            group: dict[str, Any] = {"params": params, "weight_decay": weight_decay if decays else 0.0,
                                     "group": ("backbone" if backbone else "head") + ("" if decays else "_no_decay")}
            if backbone:
                group["lr_scale"] = BACKBONE_LR_SCALE
            groups.append(group)
        return groups
