"""YOLO-NAS's implementation of the family contract: network, graph seams, loss, post-processing;
the detector and YOLO-NAS-Pose (one class, K keypoints) alike."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ...contract.detector import DetectorFamily, LossFn
from ...contract.family import LossContext, LossResult, TensorTree, default_parameter_groups
from ...contract.instances import InstancePrediction, InstanceTargets, random_instance_targets
from ...contract.spec import FamilySpec
from ...errors import ConfigError
from ...layers.nms import nms_with_anchors
from .loss import YoloNasLoss
from .nn import ARCHS, DETECT_SIZES, YoloNasNet, head_width
from .pose import NUM_KEYPOINTS, POSE_SIZES, YoloNasPoseNet
from .pose_loss import YoloNasPoseLoss

# Head-1 stem width -> size (each size has its own width multiplier); bare state dicts carry no
# metadata. The detector's stem is ``stem``, the pose model's ``bbox_stem`` (and ``pose_stem``).
_SIZE_BY_HEAD = {head_width(128, ARCHS[size].head_width): size for size in DETECT_SIZES}
_POSE_SIZE_BY_HEAD = {head_width(128, ARCHS[size].head_width): size for size in POSE_SIZES}
_CLASS_KEY = "heads.head1.cls_pred.weight"
_KEYPOINT_KEY = "heads.head1.pose_pred.weight"  # 2K rows: x and y per keypoint


class YoloNasFamily(DetectorFamily):
    """YOLO-NAS detect (sizes s/m/l: the detector defaults for seams, NMS and sample targets) and
    pose (sizes n/s/m/l: ``YoloNasPoseNet``; NMS over the person score, each survivor's keypoints
    gathered from its anchor)."""

    head_key = _CLASS_KEY

    def __init__(self, spec: FamilySpec, size: str, task: str, nc: int,
                 imgsz: tuple[int, int] | None = None, keypoints: int | None = None) -> None:
        super().__init__(spec, size, task, nc, imgsz, keypoints=keypoints)
        if task == "pose" and nc != 1:
            raise ConfigError(f"YOLO-NAS-Pose detects one class (person), not nc={nc}; use a one-class pose dataset")

    def build_network(self) -> nn.Module:
        if self.task == "pose":
            return YoloNasPoseNet(self.size, num_keypoints=self.keypoints or NUM_KEYPOINTS)
        return YoloNasNet(self.size, self.nc)

    @classmethod
    def infer_nc(cls, state: Mapping[str, Tensor], task: str) -> int:
        return 1 if task == "pose" else super().infer_nc(state, task)

    @classmethod
    def infer_keypoints(cls, state: Mapping[str, Tensor], task: str) -> int | None:
        return int(state[_KEYPOINT_KEY].shape[0]) // 2 if task == "pose" and _KEYPOINT_KEY in state else None

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        """The first head's stem width tells the size (detect s 64, m 96, l 128 channels; pose
        n 48, s 64, m 96, l 128)."""
        if task == "pose":
            key = "heads.head1.bbox_stem.seq.conv.weight"
            return _POSE_SIZE_BY_HEAD.get(int(state[key].shape[0])) if key in state else None
        key = "heads.head1.stem.seq.conv.weight"
        return _SIZE_BY_HEAD.get(int(state[key].shape[0])) if key in state else None

    # Loss --------------------------------------------------------------------------------
    def make_loss(self, gains: Mapping[str, float]) -> LossFn:
        if self.task == "pose":
            return YoloNasPoseLoss(self.keypoints or NUM_KEYPOINTS, cls=gains["cls"], iou=gains["iou"], dfl=gains["dfl"],
                                   pose_cls=gains["pose_cls"], pose_reg=gains["pose_reg"])
        return YoloNasLoss(self.nc, cls=gains["cls"], iou=gains["iou"], dfl=gains["dfl"])

    def compute_loss(self, outputs: list[Tensor], targets: Tensor | InstanceTargets, ctx: LossContext) -> LossResult:
        total, items = self.loss_for(ctx)(outputs, targets, normalizer_sum=ctx.normalizer_sum,
                                          world_size=ctx.world_size)
        return LossResult(total, items)

    # Seams and outputs ---------------------------------------------------------------------
    def inference_forward(self, net: nn.Module, images: Tensor) -> TensorTree:
        """Detect: the detector default. Pose: the pair the instance tasks read, anchor-major:
        ``[B, A, 5]`` (xyxy box in input pixels, person score) and ``[B, A, K, 3]`` (x, y in input
        pixels, visibility score)."""
        if self.task != "pose":
            return super().inference_forward(net, images)
        decoded = net(images)["predictions"]  # [B, 5 + 3K, A]
        det = decoded[:, :5].transpose(1, 2)
        return det, decoded[:, 5:].unflatten(1, (-1, 3)).permute(0, 3, 1, 2)

    def postprocess(self, outputs: Any, options: Any) -> list[Any]:
        """Detect: the detector default. Pose: NMS over the person score; per image an
        ``InstancePrediction`` with the keypoints of the anchors NMS kept (their visibility score
        as each keypoint's confidence)."""
        if self.task != "pose":
            return super().postprocess(outputs, options)
        det, keypoints = outputs
        kept = nms_with_anchors(det.float().transpose(1, 2), conf=options.conf, iou=options.iou,
                                max_det=options.max_det, classes=options.classes, agnostic=True)
        return [InstancePrediction(rows, keypoints=keypoints[b, anchors].float()) for b, (rows, anchors) in enumerate(kept)]

    def sample_targets(self, batch: int, imgsz: int, generator: torch.Generator) -> Any:
        if self.task == "pose":
            return random_instance_targets(batch, 1, generator, imgsz=imgsz,
                                           keypoints=self.keypoints or NUM_KEYPOINTS)
        return super().sample_targets(batch, imgsz, generator)

    def parameter_groups(self, net: nn.Module, *, weight_decay: float) -> list[dict[str, Any]]:
        """The default groups, except that the bottlenecks' residual scales (``alpha``, one number
        each) join the norms: decay would pull each residual toward zero, and SuperGradients keeps
        one-element parameters out of decay."""
        groups = default_parameter_groups(net, weight_decay=weight_decay)
        by_name = {g["group"]: g for g in groups}
        scales = {id(p) for name, p in net.named_parameters() if name.endswith(".alpha")}
        by_name["norm"]["params"] += [p for p in by_name["decay"]["params"] if id(p) in scales]
        by_name["decay"]["params"] = [p for p in by_name["decay"]["params"] if id(p) not in scales]
        return groups
