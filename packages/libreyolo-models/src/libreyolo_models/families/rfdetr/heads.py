"""RF-DETR's keypoint head (pose). The mask head (segment) is ``layers.query_masks``: there the
projector's memory map is the pixel map, and the proposals skip its blocks.

Pose: an MLP predicts per query ``K x (dx, dy, visibility logit)``; keypoints are placed like box
centres, relative to the query's reference box (``xy = d * ref_wh + ref_cxcy``).

Module names are upstream's checkpoint keys.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import Tensor, nn

from .transformer import MLP


class KeypointHead(MLP):
    """``[..., dim]`` -> ``[..., K * 3]`` raw keypoint offsets and visibility logits."""

    def __init__(self, dim: int, keypoints: int) -> None:
        super().__init__(dim, dim, keypoints * 3, 3)
        self.keypoints = keypoints
        last = cast(nn.Linear, self.layers[-1])
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)


def decode_keypoints(raw: Tensor, reference: Tensor) -> Tensor:
    """``raw [..., Q, K*3]`` with reference boxes ``[..., Q, 4]`` -> ``[..., Q, K, 3]``: x, y
    normalised to the input, then the raw visibility logit."""
    kp = raw.view(*raw.shape[:-1], -1, 3)
    xy = kp[..., :2] * reference[..., None, 2:] + reference[..., None, :2]
    return torch.cat((xy, kp[..., 2:3]), -1)
