"""EC's detection loss (D-FINE's criterion with MAL classification; eager only, never graphed).

Supervised sets: every decoder layer, layer 0's coarse boxes (``pre``), the encoder's selection
(``enc``) and the denoising queries of every layer and of ``pre``. Terms, with EC's gains:

- ``mal`` (1): Matching-Aware Loss. A matched query's target at its class is ``IoU**gamma``
  (detached), weight 1; every other entry a negative weighted by ``p**gamma`` (detached).
- ``bbox`` (5) and ``giou`` (2): L1 and 1 - GIoU of matched boxes.
- ``fgl`` (0.15): fine-grained localisation: cross-entropy of each edge distribution against the
  two bins around the target edge (weights by distance), weighted by the box's IoU.
- ``ddf`` (1.5): decoupled distillation: each earlier layer's edge distributions against the last
  layer's (KL at temperature 5), weighted by the teacher's confidence (IoU on matched queries),
  matched and unmatched queries averaged apart and mixed by the square roots of their counts.

Matching (GO-LSD): each set is matched on its own (Hungarian, D-FINE's costs); ``mal`` uses the
set's own matches, while ``bbox``, ``giou``, ``fgl`` and ``ddf`` use the union of the last layer's,
every earlier layer's, ``pre``'s and ``enc``'s matches (a query keeps the ground truth it was
matched to most often). Denoising queries are matched by construction.

Normalisation: by ``N``, the boxes over all ranks divided by the ranks (at least 1), and for the
union's terms by its pairs likewise; denoising terms by ``N`` times this rank's denoising groups.
Both counts go through ``normalizer_sum`` in one call, whatever the data. Each rank's terms are
its sums over these, so DDP's gradient average gives upstream's loss.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ...layers.boxes import aligned_iou, xywh_to_xyxy
from ...layers.detr.denoising import DenoisingQueries
from ...layers.giou import generalized_iou
from ...layers.hungarian import EMPTY_MATCH, EPS_LOG, HungarianMatcher, Match
from ...layers.set_targets import GroupedTargets
from .fdr import bbox2distance
from .variants import REG_MAX

LOSS_NAMES = ("mal", "bbox", "giou", "fgl", "ddf")
DDF_TEMPERATURE = 5.0


def union_matches(sets: list[list[Match]]) -> list[Match]:
    """GO-LSD's union of several sets' matches, per image: each query keeps the ground truth it
    was paired with most often (ties: the smallest ground-truth index)."""
    out = []
    for per_image in zip(*sets):
        pairs = np.concatenate([np.stack(m) for m in per_image if len(m[0])], 1) if any(len(m[0]) for m in per_image) \
            else np.zeros((2, 0), np.int64)
        unique, counts = np.unique(pairs, axis=1, return_counts=True)
        order = np.argsort(-counts, kind="stable")
        kept: dict[int, int] = {}
        for q, g in unique[:, order].T:
            kept.setdefault(int(q), int(g))
        out.append((np.array(list(kept), np.int64), np.array(list(kept.values()), np.int64)))
    return out


def index_of(matches: list[Match], offsets: list[int], device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    """Matches per image -> ``(image, query, ground-truth row)`` int64 index tensors."""
    rows = [np.stack((np.full_like(q, b), q, g + offsets[b])) for b, (q, g) in enumerate(matches) if len(q)]
    flat = torch.from_numpy(np.concatenate(rows, 1) if rows else np.zeros((3, 0), np.int64)).to(device)
    return flat[0], flat[1], flat[2]


class ECLoss:
    """EC's criterion (see the module docstring). Holds no parameters.

    Args:
        gains: weight of each term by name (``mal``, ``bbox``, ``giou``, ``fgl``, ``ddf``).
        gamma: MAL's power (2).
        matcher: the Hungarian matcher (class 2, L1 5, GIoU 2; ``log(p + 1e-8)`` class cost).
    """

    def __init__(self, gains: Mapping[str, float], *, gamma: float = 2.0,
                 matcher: HungarianMatcher | None = None) -> None:
        missing = [name for name in LOSS_NAMES if name not in gains]
        if missing:
            raise ValueError(f"loss gains {dict(gains)} lack {missing}; EC's terms are {LOSS_NAMES}")
        self.gamma = gamma
        self.gains = torch.tensor([float(gains[name]) for name in LOSS_NAMES])
        self.matcher = matcher or HungarianMatcher(cost_class=2.0, cost_bbox=5.0, cost_giou=2.0, log_eps=EPS_LOG)

    def __call__(self, outputs: Mapping[str, Tensor], targets: GroupedTargets, denoising: DenoisingQueries, *,
                 normalizer_sum: Callable[[Tensor], Tensor] | None = None,
                 world_size: int = 1) -> tuple[Tensor, Tensor]:
        """The loss of one (rank's) batch: ``(total, items)``, items ``float32 [5]`` detached
        (gains applied, summed over every supervised set)."""
        logits, boxes = outputs["logits"].float(), outputs["boxes"].float()
        layers = logits.shape[0]
        device = logits.device
        offsets = targets.offsets()
        gt_labels = targets.labels.to(device, non_blocking=True)
        gt_boxes = targets.boxes.to(device, non_blocking=True)
        all_logits = torch.cat((logits, outputs["pre_logits"][None].float(), outputs["enc_logits"][None].float()))
        all_boxes = torch.cat((boxes, outputs["pre_boxes"][None].float(), outputs["enc_boxes"][None].float()))
        matches = self.matcher(all_logits.detach(), all_boxes.detach(), targets)   # [L + 2][B]
        go = union_matches([matches[layers - 1], *matches[:layers - 1], *matches[layers:]])
        local = torch.tensor([float(targets.total), float(sum(len(q) for q, _ in go))], device=device)
        counts = normalizer_sum(local) if normalizer_sum is not None else local
        n_boxes, n_go = (counts / world_size).clamp(min=1.0).unbind()
        go_index = index_of(go, offsets, device)
        ctx = _Context(gt_labels, gt_boxes, outputs["reg_scale"], outputs["up"])
        terms = _Terms(device)
        self._balance = None
        for s in range(layers + 2):   # layers, pre, enc
            own = index_of(matches[s], offsets, device)
            terms.add(0, self.mal(all_logits[s], all_boxes[s], own, ctx) / n_boxes)
            l1, giou = self.box_terms(all_boxes[s], go_index, ctx)
            terms.add(1, l1 / n_go)
            terms.add(2, giou / n_go)
            if s < layers:
                teacher = None if s == layers - 1 else (outputs["corners"][-1], logits[-1])
                fgl, ddf = self.local_terms(outputs["corners"][s], outputs["refs"][s], boxes[s], go_index, ctx, teacher)
                terms.add(3, fgl / n_go)
                terms.add(4, ddf)
        if denoising.num_queries:
            self._denoising_terms(terms, outputs, denoising, offsets, ctx, n_boxes * denoising.groups)
        else:  # keep every output in the graph (DDP needs every parameter reached)
            keys = ("dn_logits", "dn_boxes", "dn_corners", "dn_pre_logits", "dn_pre_boxes")
            terms.add(0, 0.0 * torch.stack([outputs[k].sum() for k in keys]).sum())
        items = terms.stack() * self.gains.to(device)
        return items.sum(), items.detach()

    def _denoising_terms(self, terms: _Terms, outputs: Mapping[str, Tensor], denoising: DenoisingQueries,
                         offsets: list[int], ctx: _Context, norm: Tensor) -> None:
        matches = [(denoising.positive_slots(b).numpy(), np.tile(np.arange(n), denoising.groups)) if n else EMPTY_MATCH
                   for b, n in enumerate(denoising.counts)]
        index = index_of(matches, offsets, outputs["dn_logits"].device)
        logits, boxes = outputs["dn_logits"].float(), outputs["dn_boxes"].float()
        layers = logits.shape[0]
        sets = [(logits[s], boxes[s], s) for s in range(layers)]
        sets.append((outputs["dn_pre_logits"].float(), outputs["dn_pre_boxes"].float(), -1))
        for set_logits, set_boxes, s in sets:
            terms.add(0, self.mal(set_logits, set_boxes, index, ctx) / norm)
            l1, giou = self.box_terms(set_boxes, index, ctx)
            terms.add(1, l1 / norm)
            terms.add(2, giou / norm)
            if s >= 0:
                teacher = (outputs["dn_corners"][-1], logits[-1])
                fgl, ddf = self.local_terms(outputs["dn_corners"][s], outputs["dn_refs"][s], boxes[s], index, ctx,
                                            teacher, balance=self._balance)
                terms.add(3, fgl / norm)
                terms.add(4, ddf)

    # ------------------------------------------------------------------------------ terms
    def mal(self, logits: Tensor, boxes: Tensor, index: tuple[Tensor, Tensor, Tensor], ctx: _Context) -> Tensor:
        """Unnormalised MAL sum over ``logits [B, Q, C]``."""
        b, q, rows = index
        labels = ctx.labels[rows]
        iou = aligned_iou(xywh_to_xyxy(boxes[b, q]), xywh_to_xyxy(ctx.boxes[rows])).detach()
        target = torch.zeros_like(logits).index_put((b, q, labels), torch.ones_like(iou))
        score = torch.zeros_like(logits).index_put((b, q, labels), iou.to(logits.dtype)).pow(self.gamma)
        weight = logits.detach().sigmoid().pow(self.gamma) * (1 - target) + target
        return F.binary_cross_entropy_with_logits(logits, score, weight=weight, reduction="sum")

    @staticmethod
    def box_terms(boxes: Tensor, index: tuple[Tensor, Tensor, Tensor], ctx: _Context) -> tuple[Tensor, Tensor]:
        """Unnormalised L1 and 1 - GIoU sums over matched pairs (K may be 0: stays connected)."""
        b, q, rows = index
        pred, truth = boxes[b, q], ctx.boxes[rows]
        return (pred - truth).abs().sum(), (1 - generalized_iou(xywh_to_xyxy(pred), xywh_to_xyxy(truth))).sum()

    def local_terms(self, corners: Tensor, refs: Tensor, boxes: Tensor, index: tuple[Tensor, Tensor, Tensor],
                    ctx: _Context, teacher: tuple[Tensor, Tensor] | None,
                    balance: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        """Unnormalised FGL sum and the (already averaged) DDF of one layer ``[B, Q, ...]``.

        ``teacher``: the last layer's ``(corners, logits)`` (None: this is the last layer, no DDF).
        ``balance``: the matched / unmatched weights DDF mixes with (denoising layers reuse the
        matching layers'; None: computed here from this layer's counts and kept).
        """
        b, q, rows = index
        truth = ctx.boxes[rows]
        pred_corners = corners[b, q].reshape(-1, REG_MAX + 1)
        target, weight_right, weight_left = bbox2distance(refs[b, q].detach(), xywh_to_xyxy(truth), REG_MAX,
                                                          ctx.reg_scale, ctx.up)
        iou = aligned_iou(xywh_to_xyxy(boxes[b, q]), xywh_to_xyxy(truth)).detach()
        weight = iou[:, None].expand(-1, 4).reshape(-1)
        left = target.long()
        fgl = ((F.cross_entropy(pred_corners, left, reduction="none") * weight_left
                + F.cross_entropy(pred_corners, left + 1, reduction="none") * weight_right) * weight).sum()
        if teacher is None:
            return fgl, corners.sum() * 0.0
        t_corners, t_logits = teacher
        if torch.equal(corners, t_corners):
            return fgl, corners.sum() * 0.0
        confidence = t_logits.detach().sigmoid().max(-1).values.index_put((b, q), iou.to(t_logits.dtype))
        matched = torch.zeros_like(confidence, dtype=torch.bool).index_put((b, q), torch.ones_like(b, dtype=torch.bool))
        t = DDF_TEMPERATURE
        kl = F.kl_div(F.log_softmax(corners.reshape(-1, REG_MAX + 1) / t, 1),
                      F.softmax(t_corners.detach().reshape(-1, REG_MAX + 1) / t, 1), reduction="none").sum(-1)
        per_edge = confidence[..., None].expand(-1, -1, 4).reshape(-1) * t**2 * kl
        mask = matched[..., None].expand(-1, -1, 4).reshape(-1)
        if balance is None:
            scale = 8 / corners.shape[0]
            balance = ((mask.sum() * scale) ** 0.5, ((~mask).sum() * scale) ** 0.5)
            self._balance = balance
        pos, neg = balance
        zero = per_edge.sum() * 0.0
        on = per_edge[mask].mean() if bool(mask.any()) else zero
        off = per_edge[~mask].mean() if bool((~mask).any()) else zero
        return fgl, (on * pos + off * neg) / (pos + neg)

    _balance: tuple[Tensor, Tensor] | None = None


class _Terms:
    """Running sums of the five terms; a NaN term of one set counts as 0 (upstream's
    ``nan_to_num`` per loss entry)."""

    def __init__(self, device: torch.device) -> None:
        self.sums = [torch.zeros((), device=device) for _ in LOSS_NAMES]

    def add(self, k: int, value: Tensor) -> None:
        self.sums[k] = self.sums[k] + torch.nan_to_num(value, nan=0.0)

    def stack(self) -> Tensor:
        return torch.stack(self.sums)


class _Context:
    """The batch's ground truths and the box coding parameters, on the loss's device."""

    def __init__(self, labels: Tensor, boxes: Tensor, reg_scale: Tensor, up: Tensor) -> None:
        self.labels, self.boxes = labels, boxes
        self.reg_scale, self.up = reg_scale.detach().float(), up.detach().float()
