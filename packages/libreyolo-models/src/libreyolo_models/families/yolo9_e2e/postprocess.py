"""YOLOv9-E2E post-processing: top-k of the one-to-one branch's scores, no NMS (eager).

The one-to-one branch was trained to give each object one confident anchor, so overlapping
duplicates are rare and NMS is left out, as upstream does: the best ``max_det`` anchors (by their
best class score) are kept, then the best ``max_det`` (anchor, class) pairs among them, then the
score threshold. The output has the same form as every detector's (``layers.nms.nms_per_image``).
"""

from __future__ import annotations

import torch
from torch import Tensor


def postprocess(predictions: Tensor, *, conf: float, max_det: int, classes: list[int] | None = None) -> list[Tensor]:
    """``[B, 4 + nc, A]`` (xyxy input pixels, sigmoid scores) -> per image ``float [N, 6]``
    (x1, y1, x2, y2, score, class id), best first, ``N <= max_det``.

    An anchor may appear once per class (upstream's second top-k ranks (anchor, class) pairs);
    ``classes`` keeps only those class ids, before the top-k.
    """
    boxes = predictions[:, :4].transpose(1, 2)   # [B, A, 4]
    scores = predictions[:, 4:].transpose(1, 2)  # [B, A, C]
    batch, anchors, nc = scores.shape
    if classes is not None:
        wanted = torch.isin(torch.arange(nc, device=scores.device), torch.as_tensor(classes, device=scores.device))
        scores = scores.masked_fill(~wanted, -1.0)
    k = max(min(max_det, anchors), 0)
    anchor_index = scores.amax(-1).topk(k, dim=1).indices                       # [B, k]
    scores = scores.gather(1, anchor_index[..., None].expand(batch, k, nc))
    boxes = boxes.gather(1, anchor_index[..., None].expand(batch, k, 4))
    top, flat = scores.reshape(batch, k * nc).topk(min(max_det, k * nc), dim=1)  # [B, k2], sorted
    picked = boxes.gather(1, (flat // nc)[..., None].expand(-1, -1, 4))
    rows = torch.cat((picked, top[..., None], (flat % nc)[..., None].to(top.dtype)), 2).float()
    keep = rows[..., 4] > conf
    return [image_rows[image_keep] for image_rows, image_keep in zip(rows, keep)]
