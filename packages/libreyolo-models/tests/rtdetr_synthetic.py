"""Synthetic RT-DETR training outputs for loss tests, and the worker of the two-rank Gloo test
(module level: ``libreyolo_ddp.spawn`` pickles it by name).

Each image's outputs are drawn from a generator seeded by the image's global id, so one process
holding images 0-3 and two ranks holding 0-1 and 2-3 see the same numbers for every image.
"""

from __future__ import annotations

import torch
from torch import Tensor

from libreyolo_models.layers.detr.denoising import build_denoising
from libreyolo_models.layers.detr.set_loss import RTDETRLoss
from libreyolo_models.layers.set_targets import group_targets

NC, QUERIES, LAYERS, DENOISING = 3, 12, 2, 6
GAINS = {"vfl": 1.0, "bbox": 5.0, "giou": 2.0}

# Boxes (class, cx, cy, w, h) per image of a four-image batch: every half has an image with 3 boxes,
# so one process and each of two ranks build the same denoising layout (2 groups of 3 + 3 slots).
BOXES = {
    0: [(0, 0.30, 0.30, 0.20, 0.25), (2, 0.70, 0.60, 0.30, 0.20)],
    1: [(1, 0.50, 0.50, 0.40, 0.40), (1, 0.20, 0.80, 0.10, 0.10), (0, 0.80, 0.20, 0.15, 0.30)],
    2: [],
    3: [(2, 0.40, 0.60, 0.20, 0.20), (0, 0.45, 0.55, 0.20, 0.30), (1, 0.75, 0.25, 0.25, 0.15)],
}
BACKGROUND_HALF = {0: BOXES[0], 1: BOXES[1], 2: [], 3: []}


def target_rows(images: list[int], boxes: dict[int, list[tuple]]) -> Tensor:
    """``[M, 6]`` rows for a batch holding ``images`` (image index = position in the batch)."""
    rows = [(float(pos), *map(float, box)) for pos, image in enumerate(images) for box in boxes[image]]
    return torch.tensor(rows, dtype=torch.float32).reshape(-1, 6)


def image_outputs(image: int, dn_slots: int) -> dict[str, Tensor]:
    """One image's outputs (leaves that require grad), the same for a given image id."""
    g = torch.Generator().manual_seed(1000 + image)
    shapes = {"logits": (LAYERS, QUERIES, NC), "boxes": (LAYERS, QUERIES, 4), "enc_logits": (QUERIES, NC),
              "enc_boxes": (QUERIES, 4), "dn_logits": (LAYERS, dn_slots, NC), "dn_boxes": (LAYERS, dn_slots, 4)}
    out = {}
    for name, shape in shapes.items():
        raw = torch.randn(shape, generator=g)
        out[name] = (raw.sigmoid() * 0.8 + 0.1 if "boxes" in name else raw * 2).requires_grad_()
    return out


def batch_loss(images: list[int], boxes: dict[int, list[tuple]], *, normalizer_sum=None, world_size: int = 1):  # noqa: ANN001, ANN201
    """Loss of a batch of ``images``: ``(total, items, {image: {name: grad}})``."""
    targets = target_rows(images, boxes)
    grouped = group_targets(targets, len(images), NC)
    dn = build_denoising(grouped, NC, QUERIES, num_denoising=DENOISING, label_noise_ratio=0.0, box_noise_scale=0.0)
    leaves = {image: image_outputs(image, dn.num_queries) for image in images}
    outputs = {}
    for name in leaves[images[0]]:
        batch_dim = 1 if name in ("logits", "boxes", "dn_logits", "dn_boxes") else 0
        outputs[name] = torch.stack([leaves[i][name] for i in images], batch_dim)
    total, items = RTDETRLoss(NC, GAINS)(outputs, grouped, dn, normalizer_sum=normalizer_sum, world_size=world_size)
    total.backward()
    grads = {i: {name: leaf.grad.clone() for name, leaf in leaves[i].items()} for i in images}
    return total.detach(), items, grads


def rank_loss(halves: list[list[int]]) -> list[dict] | None:
    """One rank of the two-rank test: its half of the batch, normalised by the all-reduced count,
    for both box sets (boxes on both ranks; rank 1 all background). One spawn serves both."""
    import libreyolo_ddp

    env = libreyolo_ddp.dist_env()
    found = {}
    for background, boxes in ((False, BOXES), (True, BACKGROUND_HALF)):
        calls: list[float] = []

        def reduce(local: Tensor, calls: list[float] = calls) -> Tensor:
            calls.append(float(local))
            return libreyolo_ddp.all_reduce_sum(local)

        total, items, grads = batch_loss(halves[env.rank], boxes, normalizer_sum=reduce, world_size=env.world_size)
        found[background] = {"total": total, "items": items, "grads": grads, "calls": calls}
    return libreyolo_ddp.gather_to_rank_zero(found)
