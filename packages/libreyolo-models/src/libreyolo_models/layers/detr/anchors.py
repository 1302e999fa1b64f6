"""The encoder's anchor boxes, in logit space, and the fixed-size buffers some decoders keep.

Every encoder token gets an anchor box at its cell centre, 0.05 of the image wide at the first
decoder level and doubling per level; the encoder's box head predicts a delta on top of it in
logit space. Anchors within ``margin`` of the border are invalid (their logit is +inf and their
memory token is zeroed), so no query starts on one.

RT-DETR builds them from the feature shapes on every call. RT-DETRv2, D-FINE, DEIM, RT-DETRv4 and
DEIMv2 also keep them as persistent buffers (``decoder.anchors``, ``decoder.valid_mask``) built for
one input size: upstream's eval reads the buffers (so they are in every checkpoint), its training
rebuilds them. :class:`AnchorBuffers` does both safely: the buffers when the features have the
size they were built for, fresh anchors for any other size (never another size's anchors).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

ANCHOR_SIZE = 0.05    # anchor width/height at the first decoder level (doubling per level), of the image
ANCHOR_MARGIN = 0.01  # anchors this close to the border are invalid (their logit would be huge)

Shapes = list[tuple[int, int]]


def inverse_sigmoid(x: Tensor, eps: float = 1e-5) -> Tensor:
    """``log(x / (1 - x))`` with both clamped to ``eps``: finite for boxes touching the border."""
    x = x.clip(min=0.0, max=1.0)
    return torch.log(x.clip(min=eps) / (1 - x).clip(min=eps))


def level_shapes(imgsz: tuple[int, int], strides: Sequence[int]) -> Shapes:
    """``(h, w)`` of each decoder level for an ``(H, W)`` input (upstream truncates ``H / s``)."""
    return [(int(imgsz[0] / s), int(imgsz[1] / s)) for s in strides]


def encoder_anchors(shapes: Shapes, *, device: torch.device | None = None) -> tuple[Tensor, Tensor]:
    """Per-token anchor boxes in logit space ``float32 [1, S, 4]`` and their validity ``bool [1, S, 1]``.

    Built with ``arange`` on ``device`` and Python scalars, so it is safe inside a CUDA graph.
    """
    anchors = []
    for level, (h, w) in enumerate(shapes):
        gy, gx = torch.meshgrid(torch.arange(h, dtype=torch.float32, device=device),
                                torch.arange(w, dtype=torch.float32, device=device), indexing="ij")
        cx, cy = (gx + 0.5) / w, (gy + 0.5) / h
        size = torch.full_like(cx, ANCHOR_SIZE * 2.0**level)
        anchors.append(torch.stack((cx, cy, size, size), -1).reshape(1, h * w, 4))
    boxes = torch.cat(anchors, 1)
    valid = ((boxes > ANCHOR_MARGIN) * (boxes < 1 - ANCHOR_MARGIN)).all(-1, keepdim=True)
    logits = torch.log(boxes / (1 - boxes))
    return torch.where(valid, logits, torch.inf), valid


class SizeBoundBuffers(nn.Module):
    """Mixin for a module whose ``anchors`` and ``valid_mask`` buffers are a function of the input
    size it was built for (derived data, never trained): a checkpoint built for another size
    brings buffers of another shape, and this module keeps its own on load (a model trained at
    320 px and loaded for 640 px, or the reverse; the final validation of a run at another size)."""

    def _load_from_state_dict(self, state_dict: dict[str, Tensor], prefix: str, *args: object,
                              **kwargs: object) -> None:
        for name in ("anchors", "valid_mask"):
            key = prefix + name
            own = getattr(self, name, None)
            if isinstance(own, Tensor) and key in state_dict and state_dict[key].shape != own.shape:
                state_dict[key] = own.detach().clone()
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


class AnchorBuffers(SizeBoundBuffers):
    """Mixin for a decoder that keeps ``anchors [1, S, 4]`` and ``valid_mask [1, S, 1]`` buffers
    built for one input size (``built_shapes``), as upstream's checkpoints carry them.

    ``anchors_for(shapes)`` returns the buffers when ``shapes`` are the built ones (so weights that
    changed them, like the compatibility fills, are honoured) and anchors generated for ``shapes``
    otherwise: training or predicting at another size never reads another size's anchors. Loading a
    checkpoint built for another size keeps this model's buffers (they are a function of the size,
    not learned; ``SizeBoundBuffers``).
    """

    anchors: Tensor
    valid_mask: Tensor
    built_shapes: Shapes

    def register_anchor_buffers(self, shapes: Shapes) -> None:
        anchors, valid = encoder_anchors(shapes)
        self.built_shapes = list(shapes)
        self.register_buffer("anchors", anchors)
        self.register_buffer("valid_mask", valid)

    def anchors_for(self, shapes: Shapes, device: torch.device) -> tuple[Tensor, Tensor]:
        if list(shapes) == self.built_shapes:
            return self.anchors, self.valid_mask
        return encoder_anchors(shapes, device=device)
