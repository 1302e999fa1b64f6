"""The YOLO-NAS-Pose network: YOLO-NAS's backbone and neck with per-level pose heads (one person
class, ``K`` keypoints with visibility). Tensors in, tensors out.

The family's ``pose`` task builds it (``LibreYOLO("LibreYOLONASn-pose.yaml")``): ``raw_outputs`` is
the training seam (``pose_loss.py`` reads it), ``decode`` what NMS and the keypoint post-processing
read (``family.py``).

State-dict keys (``backbone.``, ``neck.``, ``heads.head{1,2,3}.{pose_stem,bbox_stem,cls_convs,
reg_convs,pose_convs,cls_pred,reg_pred,pose_pred}``) match upstream LibreYOLO's pose model (itself
SuperGradients' ``YoloNASPose`` with ``pose_conf_in_class_head``, separate stems, plain 3x3 pose
convs) for sizes n, s, m and l.

Input convention: upstream feeds the pose model **BGR** in [0, 1] (unlike detection's RGB).
``raw_outputs`` takes the zoo's RGB in [0, 1] and flips the channels inside the network;
``upstream_outputs`` takes upstream's BGR.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ...layers.anchors import AnchorCache, dfl_expectation, distances_to_boxes, level_shapes
from .blocks import SeqConvReLU
from .nn import ARCHS, ATSS_CELL, BINS, PRIOR_PROB, STRIDES, Backbone, Neck, head_width

POSE_SIZES = ("n", "s", "m", "l")
NUM_KEYPOINTS = 17  # COCO keypoints: every upstream pose checkpoint
_BOX_WIDTHS = (128, 256, 512)   # per level, before the size's width multiplier
_POSE_WIDTHS = (128, 512, 512)
_POSE_CONVS = (2, 2, 3)


def decode_keypoints(offsets: Tensor, points: Tensor, strides: Tensor) -> Tensor:
    """Keypoint offsets ``[B, 2K, A]`` (grid units, keypoint-major x, y) -> ``[B, K, 2, A]`` in input
    pixels, given the cell centres ``points [A, 2]`` (grid units) and ``strides [A, 1]``.

    Offsets count from the cell's corner: the centre's 0.5 is taken back (upstream's
    ``compensate_grid_cell_offset``), so x = (offset + column) * stride. The network's decoding and
    the loss both read it, so training fits what predict reads.
    """
    grid, scale = points.t().unsqueeze(0), strides.t().unsqueeze(0)  # [1, 2, A], [1, 1, A]
    return (offsets.unflatten(1, (-1, 2)) + grid.unsqueeze(1) - 0.5) * scale.unsqueeze(1)


class PoseHead(nn.Module):
    """One level's pose head: a box stem feeding the class and box branches, a pose stem feeding
    ``n_convs`` 3x3 convs; the class output holds the person logit then the K visibility logits."""

    def __init__(self, c_in: int, box_width: int, pose_width: int, n_convs: int, num_keypoints: int) -> None:
        super().__init__()
        self.pose_stem = SeqConvReLU(c_in, pose_width, 1)
        self.bbox_stem = SeqConvReLU(c_in, box_width, 1)
        self.cls_convs = nn.Sequential(SeqConvReLU(box_width, box_width, 3))
        self.reg_convs = nn.Sequential(SeqConvReLU(box_width, box_width, 3))
        self.pose_convs = nn.Sequential(*(SeqConvReLU(pose_width, pose_width, 3) for _ in range(n_convs)))
        self.cls_pred = nn.Conv2d(box_width, 1 + num_keypoints, 1)
        self.reg_pred = nn.Conv2d(box_width, 4 * BINS, 1)
        self.pose_pred = nn.Conv2d(pose_width, 2 * num_keypoints, 1)
        if self.cls_pred.bias is not None:  # built with a bias; the check is for the type checker
            nn.init.constant_(self.cls_pred.bias, -math.log((1 - PRIOR_PROB) / PRIOR_PROB))

    def forward(self, x: Tensor) -> Tensor:
        """``[B, 4 * BINS + 1 + 3K, H, W]``: box-side logits, person logit, K visibility logits, then
        K (x, y) keypoint offsets in grid units (keypoint-major: x0, y0, x1, y1, ...)."""
        box = self.bbox_stem(x)
        pose = self.pose_convs(self.pose_stem(x))
        return torch.cat((self.reg_pred(self.reg_convs(box)), self.cls_pred(self.cls_convs(box)),
                          self.pose_pred(pose)), 1)


class YoloNasPoseNet(nn.Module):
    """YOLO-NAS-Pose network, sizes n/s/m/l.

    Input of ``forward`` and ``raw_outputs``: ``float [B, 3, H, W]``, RGB in [0, 1], H and W
    multiples of 32. ``forward`` returns (same in train and eval mode):
        ``predictions`` ``[B, 4 + 1 + 3K, A]``: xyxy box in input pixels, sigmoid person score,
        then per keypoint x, y (input pixels) and sigmoid visibility.
        ``raw_outputs``: per level ``[B, 4 * 17 + 1 + 3K, H/s, W/s]`` (see ``PoseHead.forward``).
    """

    def __init__(self, size: str = "n", num_keypoints: int = NUM_KEYPOINTS) -> None:
        super().__init__()
        if size not in POSE_SIZES:
            raise ValueError(f"unknown YOLO-NAS-Pose size {size!r}; known sizes: {', '.join(POSE_SIZES)}")
        arch = ARCHS[size]
        self.size, self.num_keypoints = size, num_keypoints
        self.backbone = Backbone(arch)
        self.neck = Neck(arch)
        self.heads = PoseHeads(arch.head_in, arch.head_width, num_keypoints)

    def raw_outputs(self, images: Tensor) -> list[Tensor]:
        """RGB in [0, 1] -> the three raw head maps (the training seam); BGR inside, as trained."""
        return self.heads.raw_maps(self.neck(self.backbone(images.flip(1))))

    def upstream_outputs(self, x: Tensor) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...]]:
        """Upstream's eval-mode forward on its own input (BGR in [0, 1]): see ``PoseHeads.upstream``."""
        return self.heads.upstream(self.heads.raw_maps(self.neck(self.backbone(x))))

    def forward(self, images: Tensor) -> dict[str, Tensor | list[Tensor]]:
        raw = self.raw_outputs(images)
        return {"predictions": self.heads.decode(raw), "raw_outputs": raw}


class PoseHeads(nn.Module):
    """The three levels' pose heads (keys ``head1``..``head3``) and their decoding."""

    def __init__(self, in_channels: tuple[int, int, int], multiplier: float, num_keypoints: int) -> None:
        super().__init__()
        self.num_keypoints = num_keypoints
        self.head1, self.head2, self.head3 = (
            PoseHead(c, head_width(b, multiplier), head_width(p, multiplier), n, num_keypoints)
            for c, b, p, n in zip(in_channels, _BOX_WIDTHS, _POSE_WIDTHS, _POSE_CONVS))
        self.anchors = AnchorCache(STRIDES)  # cell centres

    def raw_maps(self, feats: tuple[Tensor, Tensor, Tensor]) -> list[Tensor]:
        return [self.head1(feats[0]), self.head2(feats[1]), self.head3(feats[2])]

    def _split(self, raw: list[Tensor]) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
        """Levels concatenated ``[B, C, A]`` and cut into box logits ``[B, 4 * BINS, A]``, person logit
        ``[B, 1, A]``, visibility logits ``[B, K, A]``, keypoints ``[B, K, 2, A]`` in input pixels;
        plus boxes ``[B, 4, A]`` in input pixels, cell centres ``[A, 2]`` (grid) and strides ``[A, 1]``."""
        k = self.num_keypoints
        flat = torch.cat([r.flatten(2) for r in raw], 2)
        points, strides = self.anchors(level_shapes(raw), device=flat.device, dtype=flat.dtype)
        box_logits, person, visible, offsets = flat.split((4 * BINS, 1, k, 2 * k), 1)
        grid, scale = points.t().unsqueeze(0), strides.t().unsqueeze(0)  # [1, 2, A], [1, 1, A]
        boxes = distances_to_boxes(dfl_expectation(box_logits, BINS), grid, dim=1) * scale
        return box_logits, person, visible, decode_keypoints(offsets, points, strides), boxes, points, strides

    def decode(self, raw: list[Tensor]) -> Tensor:
        """Raw maps -> ``[B, 4 + 1 + 3K, A]`` (see ``YoloNasPoseNet``)."""
        _, person, visible, keypoints, boxes, _, _ = self._split(raw)
        triples = torch.cat((keypoints, visible.sigmoid().unsqueeze(2)), 2)  # [B, K, 3, A]
        return torch.cat((boxes, person.sigmoid(), triples.flatten(1, 2)), 1)

    def upstream(self, raw: list[Tensor]) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...]]:
        """Upstream's eval output: ``((boxes [B, A, 4], person score [B, A, 1], keypoints [B, A, K, 2],
        visibility [B, A, K]), (person logit [B, A, 1], box logits [B, A, 68], keypoints (the same
        tensor), visibility logits [B, A, K], ATSS anchor boxes [A, 4], cell centres [A, 2],
        per-level anchor counts, strides [A, 1]))``, pixels."""
        box_logits, person, visible, keypoints, boxes, points, strides = self._split(raw)
        keypoints = keypoints.permute(0, 3, 1, 2)
        centres = points * strides
        half = ATSS_CELL / 2 * strides
        counts = tuple(r.shape[2] * r.shape[3] for r in raw)
        return ((boxes.transpose(1, 2), person.sigmoid().transpose(1, 2), keypoints, visible.sigmoid().transpose(1, 2)),
                (person.transpose(1, 2), box_logits.transpose(1, 2), keypoints, visible.transpose(1, 2),
                 torch.cat((centres - half, centres + half), 1), centres, counts,
                 strides))  # type: ignore[return-value]  # counts: upstream's non-tensor leaf
