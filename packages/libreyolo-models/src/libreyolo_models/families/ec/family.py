"""EC's implementation of the family contract: network, graph seams, denoising head, loss,
post-processing and its optimizer groups."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor, nn

from ...contract.family import NORM_TYPES, Family, LossContext, LossResult
from ...contract.instances import InstanceTargets, random_instance_targets, set_predictor_postprocess
from ...contract.spec import FamilySpec
from ...errors import CheckpointError, ConfigError
from ...layers.detr.denoising import build_denoising
from ...layers.set_postprocess import cxcywh_to_pixel_xyxy, xy_to_pixels
from ...layers.set_targets import group_targets
from ...layers.targets import random_box_targets
from .loss import ECLoss
from .nn import ECNet, ECPoseNet
from .pose_denoising import build_pose_denoising
from .pose_loss import ECPoseLoss
from .seg_loss import ECSegmentLoss, grouped_masks
from .variants import (
    BOX_NOISE_SCALE,
    KEYPOINTS,
    LABEL_NOISE_RATIO,
    NUM_DENOISING,
    NUM_QUERIES,
    POSE_QUERIES,
    VARIANTS,
)

_ANCHOR_KEYS = ("decoder.anchors", "decoder.valid_mask")
_LOSSES = {"detect": ECLoss, "segment": ECSegmentLoss, "pose": ECPoseLoss}
_KEYPOINT_KEY = "decoder.keypoint_embedding.weight"
POSE_DENOISING = 20  # DETRPose's dn_number: about twice this many denoising queries per batch

# Upstream's fine-tuning recipe trains the ViT and its adapter at 0.05x (s, m) or 0.01x (l, x).
BACKBONE_LR_SCALE = {"s": 0.05, "m": 0.05, "l": 0.01, "x": 0.01}


def _hw(imgsz: int | tuple[int, int]) -> tuple[int, int]:
    return (imgsz, imgsz) if isinstance(imgsz, int) else (int(imgsz[0]), int(imgsz[1]))


class ECFamily(Family):
    """EC detect, segment and pose, sizes s/m/l/x.

    Training is split: ``training_forward`` (backbone + encoder) is what a CUDA graph may capture;
    ``training_head`` runs the decoder eagerly with this batch's denoising queries. Segment and
    pose seams return a pair: the detections ``[B, Q, 4 + nc]`` and the masks ``[B, Q, H/4, W/4]``
    (logits) or keypoints ``[B, 60, K, 3]`` (x, y in input pixels, confidence 1: EC predicts no
    visibility). A pose model is one class (person): its box is its keypoints' extent, its score the
    person logit's probability.
    """

    training_head_note = (
        "the decoder and the loss stay eager: its contrastive denoising queries are built from each batch's "
        "boxes, so its token count changes from batch to batch and no graph can hold it (backbone + "
        "encoder are captured)")

    imgsz: tuple[int, int]  # always set: the built size (H, W), the declared default when not given

    def __init__(self, spec: FamilySpec, size: str, task: str, nc: int,
                 imgsz: int | tuple[int, int] | None = None, keypoints: int | None = None) -> None:
        super().__init__(spec, size, task, nc, keypoints=keypoints)
        if task == "pose" and nc != 1:
            raise ConfigError(f"EC pose detects one class (person), not nc={nc}; use a one-class pose dataset")
        self.imgsz = _hw(imgsz if imgsz is not None else spec.default_imgsz(size, task))
        if any(side <= 0 or side % 32 for side in self.imgsz):
            raise ConfigError(f"imgsz={self.imgsz} does not fit EC: sides must be positive multiples of 32 "
                              "(16-pixel patches resampled to strides 8, 16 and 32)")
        self._loss: tuple[tuple[float, ...], Any] | None = None
        # Denoising queries per training batch (upstream: about 100). A smaller number makes quick
        # CPU runs cheaper: at 64 px the decoder's 84 matching queries would carry ~200 of them.
        self.num_denoising = NUM_DENOISING
        self.pose_denoising = POSE_DENOISING
        # The backbone's learning-rate multiplier (upstream's, for a pretrained ViT); a run from
        # scratch sets 1.0.
        self.backbone_lr_scale = BACKBONE_LR_SCALE[size]

    def build_network(self) -> nn.Module:
        if self.task == "pose":
            return ECPoseNet(self.size, imgsz=self.imgsz, keypoints=self.keypoints or KEYPOINTS)
        return ECNet(self.size, self.nc, imgsz=self.imgsz, task=self.task)

    @classmethod
    def infer_keypoints(cls, state: Mapping[str, Tensor], task: str) -> int | None:
        return int(state[_KEYPOINT_KEY].shape[0]) if task == "pose" and _KEYPOINT_KEY in state else None

    @classmethod
    def infer_nc(cls, state: Mapping[str, Tensor], task: str) -> int:
        if task == "pose":
            return 1
        key = "decoder.enc_score_head.weight"
        if key not in state:
            raise CheckpointError(f"not an EC detection state dict: {key!r} is missing")
        return int(state[key].shape[0])

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        """The ViT's width and feed-forward width tell the size."""
        token, fc1 = "backbone.backbone.register_token", "backbone.backbone.blocks.0.mlp.fc1.weight"
        if token not in state or fc1 not in state:
            return None
        width, hidden = int(state[token].shape[-1]), int(state[fc1].shape[0])
        for size, v in VARIANTS.items():
            if v.vit_width == width and int(width * v.vit_ffn_ratio) == hidden:
                return size
        return None

    def check_state(self, net: nn.Module, state: Mapping[str, Tensor], source: str) -> None:
        """As the default, except that anchors built for another image size are accepted: they
        are derived data, and the network keeps its own (``ECDecoder`` on load)."""
        own = net.state_dict()
        adapted = {k: (own[k] if k in _ANCHOR_KEYS and k in own and v.shape != own[k].shape else v)
                   for k, v in state.items()}
        super().check_state(net, adapted, source)

    # Graph seams -------------------------------------------------------------------------
    def inference_forward(self, net: nn.Module, images: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        """``[B, 3, H, W]`` -> ``[B, 300, 4 + nc]``: xyxy boxes in input pixels, sigmoid scores;
        segment and pose add their masks or keypoints (see the class docstring)."""
        out = net(images)
        h, w = images.shape[-2:]
        if self.task == "pose":
            kp = xy_to_pixels(out["pred_keypoints"].unflatten(-1, (-1, 2)), h, w)
            boxes = torch.cat((kp.amin(2), kp.amax(2)), -1)
            det = torch.cat((boxes, out["pred_logits"][..., :1].sigmoid()), -1)
            return det, torch.cat((kp, torch.ones_like(kp[..., :1])), -1)
        det = torch.cat((cxcywh_to_pixel_xyxy(out["pred_boxes"], h, w), out["pred_logits"].sigmoid()), -1)
        return (det, out["pred_masks"]) if self.task == "segment" else det

    def training_forward(self, net: nn.Module, images: Tensor) -> list[Tensor]:
        """The captured prefix: backbone + encoder -> three maps (nothing depends on the targets)."""
        return net.features(images)  # type: ignore[operator]

    def training_head(self, net: nn.Module, outputs: list[Tensor], targets: Any) -> dict[str, Any]:
        """The eager remainder's network part: the decoder with this batch's denoising queries."""
        if self.task == "pose":
            return self._pose_head(net, outputs, targets)
        boxes = targets.boxes if isinstance(targets, InstanceTargets) else targets
        grouped = group_targets(boxes, int(outputs[0].shape[0]), self.nc)
        queries = min(NUM_QUERIES, sum(int(f.shape[2]) * int(f.shape[3]) for f in outputs))
        # The noise comes from torch's global CPU generator: seeded per rank by the trainer, and
        # restored by graph capture around its warmup, so eager and graphed runs draw the same.
        denoising = build_denoising(grouped, self.nc, queries, num_denoising=self.num_denoising,
                                    label_noise_ratio=LABEL_NOISE_RATIO,
                                    box_noise_scale=BOX_NOISE_SCALE).to(outputs[0].device)
        head = net.forward_train(outputs, denoising)  # type: ignore[operator]
        extra = {"target_masks": grouped_masks(targets)} if self.task == "segment" else {}
        return {**head, "targets": grouped, "denoising": denoising, **extra}

    def _pose_head(self, net: nn.Module, outputs: list[Tensor], targets: InstanceTargets) -> dict[str, Any]:
        """The pose decoder with DETRPose's keypoint denoising queries (persons are class 0)."""
        if targets.keypoints is None:
            raise ValueError("EC pose training needs keypoints in its targets (pose data)")
        batch = int(outputs[0].shape[0])
        grouped = group_targets(targets.boxes, batch, self.nc)
        order = torch.sort(targets.boxes[:, 0].long().cpu(), stable=True).indices
        keypoints = targets.keypoints[order].float()
        k = keypoints.shape[1] if keypoints.dim() == 3 else (self.keypoints or KEYPOINTS)
        keypoints = keypoints.reshape(-1, k, 3)
        sigmas = targets.sigmas if targets.sigmas is not None else torch.full((k,), 1.0 / k)
        boxes = grouped.boxes
        xyxy = torch.cat((boxes[:, :2] - boxes[:, 2:] / 2, boxes[:, :2] + boxes[:, 2:] / 2), 1)
        queries = min(POSE_QUERIES, sum(int(f.shape[2]) * int(f.shape[3]) for f in outputs))
        denoising = build_pose_denoising(grouped.labels, xyxy, keypoints, boxes[:, 2] * boxes[:, 3], grouped.counts,
                                         (int(self.imgsz[0]), int(self.imgsz[1])), queries,
                                         dn_number=self.pose_denoising, sigmas=[10 * float(s) for s in sigmas])
        denoising = _to(denoising, outputs[0].device)
        head = net.forward_train(outputs, denoising)  # type: ignore[operator]
        return {**head, "targets": grouped, "denoising": denoising, "target_keypoints": keypoints, "sigmas": sigmas}

    def compute_loss(self, outputs: Mapping[str, Any], targets: Tensor, ctx: LossContext) -> LossResult:
        """Matching and the terms over ``training_head``'s outputs (which carry the grouped targets)."""
        if not isinstance(outputs, Mapping) or "denoising" not in outputs:
            raise TypeError("EC's compute_loss reads the training head's outputs: call "
                            "training_head(net, training_forward(net, images), targets) first")
        decl = self.spec.task(self.task)
        gains = {**decl.loss_gains, **ctx.gains}
        key = tuple(float(gains[name]) for name in decl.loss_names)
        if self._loss is None or self._loss[0] != key:
            self._loss = (key, _LOSSES[self.task](gains))
        loss = self._loss[1]
        common = {"normalizer_sum": ctx.normalizer_sum, "world_size": ctx.world_size}
        if self.task == "pose":
            total, items = loss(outputs, outputs["targets"], outputs["target_keypoints"], outputs["sigmas"],
                                outputs["denoising"], **common)
        elif self.task == "segment":
            total, items = loss(outputs, outputs["targets"], outputs["denoising"], masks=outputs["target_masks"], **common)
        else:
            total, items = loss(outputs, outputs["targets"], outputs["denoising"], **common)
        return LossResult(total, items)

    def postprocess(self, outputs: Any, options: Any) -> list[Any]:
        return set_predictor_postprocess(self.task, outputs, options)

    def sample_targets(self, batch: int, imgsz: int, generator: torch.Generator) -> Any:
        if self.task == "detect":
            return random_box_targets(batch, self.nc, generator)
        return random_instance_targets(batch, self.nc, generator, imgsz=imgsz, masks=self.task == "segment",
                                       keypoints=(self.keypoints or KEYPOINTS) if self.task == "pose" else None)

    def head_prefixes(self) -> tuple[str, ...]:
        if self.task == "pose":
            return ()  # its two outputs (person, background) are the same for every pose dataset
        return ("decoder.enc_score_head.", "decoder.dec_score_head.", "decoder.denoising_class_embed.")

    # Training hooks ------------------------------------------------------------------------
    def parameter_groups(self, net: nn.Module, *, weight_decay: float) -> list[dict[str, Any]]:
        """Backbone (ViT + adapter) at ``lr_scale`` 0.05 (s, m) or 0.01 (l, x); no decay on norms
        and biases (attention's ``in_proj_bias`` included). No group is named ``bias``, so no warmup
        starts from ``warmup_bias_lr``."""
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
                group["lr_scale"] = self.backbone_lr_scale
            groups.append(group)
        return groups


def _to(denoising: Any, device: torch.device) -> Any:
    """Pose denoising queries on ``device`` (built on the host)."""
    return replace(denoising, labels=denoising.labels.to(device), valid=denoising.valid.to(device),
                   points_unact=denoising.points_unact.to(device),
                   attn_mask=None if denoising.attn_mask is None else denoising.attn_mask.to(device))
