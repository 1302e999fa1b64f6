"""The EC network: ViT + adapter -> hybrid encoder -> D-FINE-style decoder. Tensors in, a dict of
tensors out; no NMS, no ``.item()``, no I/O.

State-dict keys are upstream's (``backbone.``, ``encoder.``, ``decoder.``), in upstream's order, so
upstream checkpoints load unchanged. The decoder's ``anchors`` / ``valid_mask`` buffers are laid
out for the build image size (upstream's ``eval_spatial_size``, 640 by default): a checkpoint
built for another size carries other shapes (see ``ECFamily.remap_state``). Training is split
like RT-DETR's: ``features`` (backbone + encoder) does not depend on the targets; the decoder's
denoising queries do.
"""

from __future__ import annotations

from torch import Tensor, nn

from ...layers.detr.denoising import DenoisingQueries
from ...layers.normalize import InputNormalize
from .backbone import ViTAdapter
from .decoder import ECDecoder
from .encoder import HybridEncoder
from .pose_decoder import ECPoseDecoder
from .pose_denoising import PoseDenoising
from .variants import KEYPOINTS, variant

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class ECNet(nn.Module):
    """EC detect (or segment: ``task="segment"``, upstream's ``LibreECSegModel``) of ``size`` (s, m,
    l, x) for ``nc`` classes, built for ``imgsz`` ``(H, W)``.

    Input: ``float [B, 3, H, W]`` RGB in [0, 1], sides multiples of 32; ImageNet normalisation
    happens inside.
    """

    def __init__(self, size: str = "s", nc: int = 80, imgsz: tuple[int, int] = (640, 640),
                 task: str = "detect") -> None:
        super().__init__()
        if task not in ("detect", "segment"):
            raise ValueError(f"ECNet builds detect or segment, not {task!r} (pose: ECPoseNet)")
        v = variant(size)
        self.size, self.nc, self.imgsz, self.task = size, nc, imgsz, task
        self.normalize = InputNormalize(IMAGENET_MEAN, IMAGENET_STD)
        self.backbone = ViTAdapter(v)
        self.encoder = HybridEncoder(v)
        self.decoder = ECDecoder(nc, v.hidden, v.decoder_ffn, imgsz, masks=task == "segment")

    def features(self, images: Tensor) -> list[Tensor]:
        """The training-capture prefix: images in [0, 1] -> the encoder's maps at strides 8, 16, 32."""
        return self.encoder(self.backbone(self.normalize(images)))

    def forward(self, images: Tensor) -> dict[str, Tensor]:
        """``pred_logits [B, 300, nc]`` (raw) and ``pred_boxes [B, 300, 4]`` (cx, cy, w, h
        normalised, not clamped), queries in encoder top-k order; segment adds ``pred_masks
        [B, 300, H/4, W/4]`` (raw logits). The same in train and eval mode."""
        return self.decoder(self.features(images))

    def upstream_outputs(self, x: Tensor) -> dict[str, Tensor]:
        """Upstream's eval forward on its own input convention (ImageNet-normalised images)."""
        return self.decoder(self.encoder(self.backbone(x)))

    def forward_train(self, features: list[Tensor], denoising: DenoisingQueries) -> dict[str, Tensor]:
        """The eager training remainder: the decoder with ``denoising`` queries
        (``ECDecoder.forward_train``)."""
        return self.decoder.forward_train(features, denoising)


class ECPoseNet(nn.Module):
    """EC pose (upstream's ``LibreECPoseModel``) of ``size``: 60 queries, 2 classes (person,
    background), 17 keypoints (``keypoints`` another count: a dataset's own layout); built for
    ``imgsz`` ``(H, W)``. Same backbone and encoder as detect."""

    def __init__(self, size: str = "s", imgsz: tuple[int, int] = (640, 640), keypoints: int = KEYPOINTS) -> None:
        super().__init__()
        v = variant(size)
        self.size, self.imgsz, self.task, self.keypoints = size, imgsz, "pose", keypoints
        self.normalize = InputNormalize(IMAGENET_MEAN, IMAGENET_STD)
        self.backbone = ViTAdapter(v)
        self.encoder = HybridEncoder(v)
        self.decoder = ECPoseDecoder(v.hidden, v.pose_ffn, v.pose_layers, imgsz, keypoints=keypoints)

    def features(self, images: Tensor) -> list[Tensor]:
        return self.encoder(self.backbone(self.normalize(images)))

    def forward(self, images: Tensor) -> dict[str, Tensor]:
        """``pred_logits [B, 60, 2]`` (raw) and ``pred_keypoints [B, 60, 34]`` (x, y normalised)."""
        return self.decoder(self.features(images))

    def upstream_outputs(self, x: Tensor) -> dict[str, Tensor]:
        """Upstream's eval forward on its own input convention (ImageNet-normalised images)."""
        return self.decoder(self.encoder(self.backbone(x)))

    def forward_train(self, features: list[Tensor], denoising: PoseDenoising | None = None) -> dict[str, Tensor]:
        """Every layer's outputs for the loss, with optional denoising queries
        (``ECPoseDecoder.forward_train``)."""
        return self.decoder.forward_train(features, denoising)
