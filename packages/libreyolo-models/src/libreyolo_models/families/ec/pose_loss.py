"""EC's pose loss (DETRPose's criterion, as upstream EC trains its pose model; eager only).

Queries are persons (class 0 of the two logits; the second is never a target). Terms and gains:

- ``vfl`` (2): varifocal classification. A matched query's target at its class is the OKS of its
  keypoints (detached); every entry is weighted ``alpha * p**gamma`` where not a target plus the
  target score; binary cross-entropy summed and divided by the persons.
- ``keypoints`` (10): L1 of matched keypoints (x and y normalised), labelled keypoints only.
- ``oks`` (4): 1 - OKS of matched keypoints (the dataset's sigmas, the box area as the person's).

Matching (Hungarian, per set): 2 x focal class cost (``log(p + 1e-8)``) + 10 x labelled-keypoint L1
+ 4 x (1 - OKS). Supervised sets: every decoder layer, layer 0 (``pre``) and the encoder's
selection, each with its own matches for ``vfl``; the keypoint terms use GO-LSD's union of all of
them (``loss.union_matches``) and are divided by the union's pairs. Denoising queries of every
layer and of ``pre`` are matched by construction and divided by the persons times the groups.
Counts are sums over ranks through one ``normalizer_sum`` call, divided by the ranks (>= 1).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ...layers.hungarian import EMPTY_MATCH, HungarianMatcher
from ...layers.set_targets import GroupedTargets
from .loss import index_of, union_matches
from .pose_denoising import PoseDenoising

POSE_LOSS_NAMES = ("vfl", "keypoints", "oks")
ALPHA, GAMMA = 0.25, 2.0
COST_CLASS, COST_KEYPOINTS, COST_OKS = 2.0, 10.0, 4.0


def oks(pred: Tensor, truth: Tensor, labelled: Tensor, area: Tensor, sigmas: Tensor) -> Tensor:
    """OKS ``[...]`` of keypoints ``pred [..., K, 2]`` against ``truth [..., K, 2]`` (labelled
    ``[..., K]`` weights, ``area [...]`` normalised), DETRPose's form (1e-6 in the mean's divisor)."""
    variances = (sigmas * 2) ** 2
    d2 = ((pred - truth) ** 2).sum(-1)
    e = torch.exp(-d2 / (area[..., None] * variances * 2)) * labelled
    return e.sum(-1) / (labelled.sum(-1) + 1e-6)


class ECPoseLoss:
    """The criterion (see the module docstring). Holds no parameters."""

    def __init__(self, gains: Mapping[str, float]) -> None:
        missing = [name for name in POSE_LOSS_NAMES if name not in gains]
        if missing:
            raise ValueError(f"loss gains {dict(gains)} lack {missing}; EC pose's terms are {POSE_LOSS_NAMES}")
        self.gains = torch.tensor([float(gains[name]) for name in POSE_LOSS_NAMES])
        self.solver = HungarianMatcher()

    def cost(self, logits: Tensor, keypoints: Tensor, gt: _Truth) -> Tensor:
        """``[S, B, Q, G]`` matching costs of sets ``logits [S, B, Q, C]``, ``keypoints [S, B, Q, K, 2]``."""
        rows = gt.rows                                                          # [B, G]
        prob = logits[..., 0].float().sigmoid()[..., None]                      # persons: class 0
        pos = ALPHA * (1 - prob) ** GAMMA * -(prob + 1e-8).log()
        neg = (1 - ALPHA) * prob**GAMMA * -(1 - prob + 1e-8).log()
        truth = gt.xy[rows][None, :, None]                                      # [1, B, 1, G, K, 2]
        weight = gt.labelled[rows][None, :, None]                               # [1, B, 1, G, K]
        pred = keypoints.float()[:, :, :, None]                                 # [S, B, Q, 1, K, 2]
        l1 = ((pred - truth).abs() * weight[..., None]).sum((-1, -2))
        similarity = oks(pred, truth, weight, gt.area[rows][None, :, None], gt.sigmas)
        return COST_CLASS * (pos - neg) + COST_KEYPOINTS * l1 + COST_OKS * (1 - similarity.clamp(min=1e-6))

    def __call__(self, outputs: Mapping[str, Tensor], targets: GroupedTargets, keypoints: Tensor, sigmas: Tensor,
                 denoising: PoseDenoising | None, *, normalizer_sum: Callable[[Tensor], Tensor] | None = None,
                 world_size: int = 1) -> tuple[Tensor, Tensor]:
        """``keypoints``: ``[M, K, 3]`` (x, y normalised, visibility) in ``targets``' order."""
        logits = outputs["logits"].float()
        layers = logits.shape[0]
        device = logits.device
        gt = _Truth(targets, keypoints.to(device, non_blocking=True).float(), sigmas.to(device).float())
        all_logits = torch.cat((logits, outputs["pre_logits"][None].float(), outputs["enc_logits"][None].float()))
        all_kp = torch.cat((outputs["keypoints"].float(), outputs["pre_keypoints"][None].float(),
                            outputs["enc_keypoints"][None].float()))
        if targets.total:
            matches = self.solver.solve(self.cost(all_logits.detach(), all_kp.detach(), gt), targets.counts)
        else:
            matches = [[EMPTY_MATCH] * targets.batch for _ in range(layers + 2)]
        go = union_matches([matches[layers - 1], *matches[:layers - 1], *matches[layers:]])
        local = torch.tensor([float(targets.total), float(sum(len(q) for q, _ in go))], device=device)
        counts = normalizer_sum(local) if normalizer_sum is not None else local
        n_boxes, n_go = (counts / world_size).clamp(min=1.0).unbind()
        offsets = targets.offsets()
        go_index = index_of(go, offsets, device)
        terms = torch.zeros(3, device=device)
        for s in range(layers + 2):
            own = index_of(matches[s], offsets, device)
            terms = terms + torch.stack((self.vfl(all_logits[s], all_kp[s], own, gt) / n_boxes,
                                         *(t / n_go for t in self.keypoint_terms(all_kp[s], go_index, gt))))
        if denoising is not None and denoising.num_queries:
            dn = [(denoising.positive_slots(b).numpy(), np.tile(np.arange(n), denoising.groups)) if n else EMPTY_MATCH
                  for b, n in enumerate(denoising.counts)]
            index = index_of(dn, offsets, device)
            norm = n_boxes * denoising.groups
            dn_sets = [(outputs["dn_logits"][s].float(), outputs["dn_keypoints"][s].float()) for s in range(layers)]
            dn_sets.append((outputs["dn_pre_logits"].float(), outputs["dn_pre_keypoints"].float()))
            for set_logits, set_kp in dn_sets:
                terms = terms + torch.stack((self.vfl(set_logits, set_kp, index, gt) / norm,
                                             *(t / norm for t in self.keypoint_terms(set_kp, index, gt))))
        elif denoising is not None:
            terms = terms + 0.0 * (outputs["dn_logits"].sum() + outputs["dn_keypoints"].sum())
        items = torch.nan_to_num(terms, nan=0.0) * self.gains.to(device)
        return items.sum(), items.detach()

    def vfl(self, logits: Tensor, keypoints: Tensor, index: tuple[Tensor, Tensor, Tensor], gt: _Truth) -> Tensor:
        """Unnormalised varifocal sum over ``logits [B, Q, C]`` (targets: matched persons' OKS)."""
        b, q, rows = index
        score = oks(keypoints[b, q], gt.xy[rows], gt.labelled[rows], gt.area[rows], gt.sigmas).detach()
        target = torch.zeros_like(logits).index_put((b, q, torch.zeros_like(b)), torch.ones_like(score))
        target_score = torch.zeros_like(logits).index_put((b, q, torch.zeros_like(b)), score.to(logits.dtype))
        weight = ALPHA * logits.detach().sigmoid().pow(GAMMA) * (1 - target) + target_score
        return F.binary_cross_entropy_with_logits(logits, target_score, weight=weight, reduction="sum")

    @staticmethod
    def keypoint_terms(keypoints: Tensor, index: tuple[Tensor, Tensor, Tensor], gt: _Truth) -> tuple[Tensor, Tensor]:
        """Unnormalised (labelled-keypoint L1, 1 - OKS) sums over matched pairs (K may be 0)."""
        b, q, rows = index
        pred, truth, labelled = keypoints[b, q], gt.xy[rows], gt.labelled[rows]
        l1 = ((pred - truth).abs() * labelled[..., None]).sum()
        return l1, (1 - oks(pred, truth, labelled, gt.area[rows], gt.sigmas).clamp(min=1e-6)).sum()


class _Truth:
    """The batch's persons on the loss's device: keypoints, labelled flags, box areas, sigmas."""

    def __init__(self, targets: GroupedTargets, keypoints: Tensor, sigmas: Tensor) -> None:
        device = keypoints.device
        self.xy = keypoints[..., :2]
        self.labelled = (keypoints[..., 2] > 0).float()
        self.area = (targets.boxes[:, 2] * targets.boxes[:, 3]).to(device).clamp(min=1e-6)
        self.sigmas = sigmas
        self.rows = targets.padded_rows().to(device)

