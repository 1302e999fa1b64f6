"""RF-DETR's implementation of the family contract: network, graph seams, loss, post-processing
and its optimizer groups."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ...contract.family import NORM_TYPES, Family, LossContext, LossResult
from ...contract.instances import InstanceTargets, random_instance_targets, set_predictor_postprocess
from ...contract.spec import FamilySpec
from ...errors import CheckpointError, ConfigError
from ...layers.set_postprocess import cxcywh_to_pixel_xyxy, xy_to_pixels
from ...layers.set_targets import group_targets
from ...layers.targets import random_box_targets
from .loss import RFDETRLoss
from .nn import RFDETRNet
from .task_losses import RFDETRPoseLoss, RFDETRSegmentLoss
from .variants import GROUPS, KEYPOINTS, VARIANTS, VIT_DEPTH, variant

_LOSSES = {"detect": RFDETRLoss, "segment": RFDETRSegmentLoss, "pose": RFDETRPoseLoss}
_KEYPOINT_KEY = "keypoint_head.layers.2.bias"

# Upstream's optimizer: the ViT at lr_encoder (1.5e-4 against the base 1e-4, so 1.5x) times 0.7**2,
# decayed by 0.8 per layer from the top (13 steps: embeddings at 0.8**14, the final norm at 1); the
# decoder at 0.7x; everything else at 1x.
ENCODER_LR_SCALE = 1.5 * 0.7**2
LAYER_DECAY = 0.8
DECODER_LR_SCALE = 0.7
_ENCODER = "backbone.0.encoder."


def _encoder_lr_scale(name: str, scale: float = ENCODER_LR_SCALE, decay: float = LAYER_DECAY) -> float:
    """Layer-wise rate of a ViT parameter (``name`` relative to the network)."""
    depth = VIT_DEPTH + 1          # upstream counts out_feature_indexes[-1] + 1 = 13 layers
    layer = depth + 1
    if "embeddings" in name:
        layer = 0
    elif ".layer." in name:
        layer = int(name[name.find(".layer."):].split(".")[2]) + 1
    return scale * decay ** (depth + 1 - layer)


def _encoder_decays(name: str) -> bool:
    """Upstream's rule for the ViT: no decay on biases, norms, embeddings or layer scales."""
    return not any(key in name for key in ("gamma", "pos_embed", "rel_pos", "bias", "norm", "embeddings"))


def _hw(imgsz: int | tuple[int, int]) -> tuple[int, int]:
    return (imgsz, imgsz) if isinstance(imgsz, int) else (int(imgsz[0]), int(imgsz[1]))


class RFDETRFamily(Family):
    """RF-DETR detect, segment and pose, sizes n/s/m/l.

    Training runs the whole network in the captured seam (it does not depend on the targets: no
    denoising queries); matching and the loss stay eager. Segment and pose seams return a pair:
    the detections ``[B, Q, 4 + nc]`` and the masks ``[B, Q, H/4, W/4]`` (logits) or keypoints
    ``[B, Q, K, 3]`` (x, y in input pixels, visibility probability).
    """

    imgsz: tuple[int, int]  # always set: the built size (H, W), the declared default when not given

    def __init__(self, spec: FamilySpec, size: str, task: str, nc: int,
                 imgsz: int | tuple[int, int] | None = None, keypoints: int | None = None) -> None:
        super().__init__(spec, size, task, nc, keypoints=keypoints)
        v = variant(size, task)
        self.imgsz = _hw(imgsz if imgsz is not None else spec.default_imgsz(size, task))
        if any(side <= 0 or side % v.block for side in self.imgsz):
            raise ConfigError(f"imgsz={self.imgsz} does not fit RF-DETR-{size} {task}: sides must be multiples of "
                              f"{v.block} ({v.patch}-pixel patches in {v.windows}x{v.windows} windows)")
        self._loss: tuple[tuple[float, ...], Any] | None = None
        self._groups = GROUPS
        # The ViT's rate and its per-layer decay (upstream's, for a pretrained DINOv2); a run from
        # scratch sets both to 1.0.
        self.encoder_lr_scale, self.layer_decay = ENCODER_LR_SCALE, LAYER_DECAY

    def build_network(self) -> nn.Module:
        if self.task == "pose":
            return RFDETRNet(self.size, self.nc, task="pose", keypoints=self.keypoints or KEYPOINTS)
        return RFDETRNet(self.size, self.nc, task=self.task)

    @classmethod
    def infer_keypoints(cls, state: Mapping[str, Tensor], task: str) -> int | None:
        """The keypoint head's last layer predicts ``K x 3`` values per query."""
        return int(state[_KEYPOINT_KEY].shape[0]) // 3 if task == "pose" and _KEYPOINT_KEY in state else None

    @classmethod
    def infer_nc(cls, state: Mapping[str, Tensor], task: str) -> int:
        """``class_embed`` has ``nc + 1`` outputs (``nc`` for pose, upstream's one-class layout)."""
        key = "class_embed.bias"
        if key not in state:
            raise CheckpointError(f"not an RF-DETR state dict: {key!r} is missing")
        return int(state[key].shape[0]) - (0 if task == "pose" else 1)

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        """The ViT's patch size and position-table side tell the size (each size has its own)."""
        table_key = "backbone.0.encoder.encoder.embeddings.position_embeddings"
        patch_key = "backbone.0.encoder.encoder.embeddings.patch_embeddings.projection.weight"
        if table_key not in state or patch_key not in state or task not in VARIANTS:
            return None
        side = round((int(state[table_key].shape[1]) - 1) ** 0.5)
        patch = int(state[patch_key].shape[-1])
        for size, v in VARIANTS[task].items():
            if v.pe_size == side and v.patch == patch:
                return size
        return None

    # Graph seams -------------------------------------------------------------------------
    def inference_forward(self, net: nn.Module, images: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        """``[B, 3, H, W]`` -> ``[B, Q, 4 + nc]``: xyxy boxes in input pixels, sigmoid scores of the
        ``nc`` classes (the class head's extra last output, never a target, is left out); segment
        and pose add their masks or keypoints (see the class docstring)."""
        out = net(images)
        h, w = images.shape[-2:]
        boxes = cxcywh_to_pixel_xyxy(out["pred_boxes"], h, w)
        det = torch.cat((boxes, out["pred_logits"][..., :self.nc].sigmoid()), -1)
        if self.task == "segment":
            return det, out["pred_masks"]
        if self.task == "pose":
            kp = out["pred_keypoints"]
            return det, torch.cat((xy_to_pixels(kp[..., :2], h, w), kp[..., 2:].sigmoid()), -1)
        return det

    def training_forward(self, net: nn.Module, images: Tensor) -> dict[str, Any]:
        """The whole network (nothing depends on the targets): every decoder layer's outputs and
        the two-stage proposals, for every query group; segment's mask factors also in eval mode
        (validation losses)."""
        if isinstance(net, RFDETRNet):
            self._groups = (net.train_groups or net.groups) if net.training else 1
        if self.task == "segment":
            return net(images, mask_factors=True)
        return net(images)

    def compute_loss(self, outputs: Mapping[str, Any], targets: Any, ctx: LossContext) -> LossResult:
        """Matching and the terms over ``training_forward``'s outputs (segment and pose read
        ``InstanceTargets``; see ``task_losses``)."""
        decl = self.spec.task(self.task)
        gains = {**decl.loss_gains, **ctx.gains}
        key = tuple(float(gains[name]) for name in decl.loss_names)
        if self._loss is None or self._loss[0] != key:
            self._loss = (key, _LOSSES[self.task](gains))
        loss = self._loss[1]
        if isinstance(targets, InstanceTargets):
            total, items = loss(outputs, targets, self._groups, self.nc, normalizer_sum=ctx.normalizer_sum,
                                world_size=ctx.world_size)
        else:
            grouped = group_targets(targets, int(outputs["pred_logits"].shape[0]), self.nc)
            total, items = loss(outputs, grouped, self._groups, normalizer_sum=ctx.normalizer_sum,
                                world_size=ctx.world_size)
        return LossResult(total, items)

    def postprocess(self, outputs: Any, options: Any) -> list[Any]:
        return set_predictor_postprocess(self.task, outputs, options)

    def sample_targets(self, batch: int, imgsz: int, generator: torch.Generator) -> Any:
        if self.task == "detect":
            return random_box_targets(batch, self.nc, generator)
        return random_instance_targets(batch, self.nc, generator, imgsz=imgsz, masks=self.task == "segment",
                                       keypoints=self.keypoints if self.task == "pose" else None)

    def head_prefixes(self) -> tuple[str, ...]:
        return ("class_embed.", "transformer.enc_out_class_embed.")

    # Training hooks ------------------------------------------------------------------------
    def parameter_groups(self, net: nn.Module, *, weight_decay: float) -> list[dict[str, Any]]:
        """Upstream's groups: the ViT layer-wise (``lr_scale`` from 0.735 x 0.8**14 at the
        embeddings to 0.735 at its final norm; no decay on its biases, norms and embeddings), the
        decoder at 0.7x, the rest (projector, two-stage heads, class and box heads, queries) at 1x.
        Outside the ViT only biases and norm weights skip decay. No group is named ``bias``, so no
        warmup starts from ``warmup_bias_lr``."""
        buckets: dict[tuple[float, bool], list[nn.Parameter]] = {}
        for module_name, module in net.named_modules():
            for leaf, param in module.named_parameters(recurse=False):
                if not param.requires_grad:
                    continue
                name = f"{module_name}.{leaf}" if module_name else leaf
                if name.startswith(_ENCODER):
                    scale = _encoder_lr_scale(name, self.encoder_lr_scale, self.layer_decay)
                    decays = _encoder_decays(name)
                else:
                    scale = DECODER_LR_SCALE if name.startswith("transformer.decoder.") else 1.0
                    decays = not (leaf.endswith("bias") or isinstance(module, NORM_TYPES))
                buckets.setdefault((scale, decays), []).append(param)
        groups = []
        for (scale, decays), params in buckets.items():
            groups.append({"params": params, "weight_decay": weight_decay if decays else 0.0,
                           "group": f"lr{scale:.4g}" + ("" if decays else "_no_decay"), "lr_scale": scale})
        return groups
