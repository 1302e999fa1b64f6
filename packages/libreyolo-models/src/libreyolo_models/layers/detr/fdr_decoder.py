"""D-FINE's decoder (also DEIM's, RT-DETRv4's and DEIMv2's): query selection from the encoder,
then decoder layers that refine each query's box as four edge-offset distributions (``fdr.py``).

Layer 0 predicts a plain box delta on top of the encoder's proposal (``pre_bbox_head``); that box,
detached, is every later layer's reference, and each layer's distribution logits add to the
previous layer's (the refinement is in logit space, with the gradient kept through the chain).
Module names are upstream's checkpoint keys; ``up`` and ``reg_scale`` are one-element parameters
that do not train and appear twice in the state dict (``decoder.up`` and ``decoder.decoder.up``,
one tensor), as upstream's checkpoints have them.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .anchors import AnchorBuffers, inverse_sigmoid, level_shapes
from .fdr import distance2bbox, integral, weighting_function
from .fdr_layers import LQE, FDRDecoderLayer, prior_logit
from .mlp import MLP
from .norms import NORM_EPS
from .queries import gather_tokens, topk_tokens

if TYPE_CHECKING:
    from .denoising import DenoisingQueries


@dataclass(frozen=True)
class FDRConfig:
    """One size's decoder.

    Attributes:
        feat_channels, strides: width and stride of each encoder map fed to the decoder.
        dim, ffn, heads, depth: decoder width, feed-forward width, attention heads, layers.
        points: sampling points per level.
        num_queries: queries selected from the encoder (changeable on the module later).
        reg_max, reg_scale: distribution bins - 1, and the offset scale (W(n)'s curvature).
        act, mlp_act: feed-forward activation; activation of the box / position heads.
        deimv2: DEIMv2's layout (RMSNorm + SwiGLU layers, no ``enc_output``, a 3-layer position
            head computed once from the initial references, another module order).
        gateway: gated fusion in each layer (always outside DEIMv2; DEIMv2 n to x).
        share_bbox_head: one box head for every layer (DEIMv2 atto/femto/pico; aliased keys).
        imgsz: (H, W) the ``anchors``/``valid_mask`` buffers are built for.
        integer_reg_scale: keep ``reg_scale`` as int64 (DEIMv2 n-x: upstream's config writes
            ``4``, so its checkpoints hold an int64 tensor; the arithmetic promotes it to float).
    """

    feat_channels: tuple[int, ...]
    strides: tuple[int, ...]
    dim: int
    ffn: int
    depth: int
    points: tuple[int, ...]
    reg_scale: float = 4.0
    num_queries: int = 300
    heads: int = 8
    reg_max: int = 32
    act: str = "relu"
    mlp_act: str = "relu"
    deimv2: bool = False
    gateway: bool = True
    share_bbox_head: bool = False
    imgsz: tuple[int, int] = (640, 640)
    integer_reg_scale: bool = False


class FDRStack(nn.Module):
    """Holds the layers and quality heads (key ``decoder.decoder``) and aliases of ``up`` and
    ``reg_scale`` (upstream's layout); the refinement loop lives in :class:`FDRDecoder`."""

    def __init__(self, cfg: FDRConfig, up: nn.Parameter, reg_scale: nn.Parameter) -> None:
        super().__init__()
        self.up, self.reg_scale = up, reg_scale
        levels = len(cfg.strides)
        self.layers = nn.ModuleList(
            FDRDecoderLayer(cfg.dim, cfg.heads, cfg.ffn, levels, list(cfg.points), act=cfg.act, rms=cfg.deimv2,
                            gateway=cfg.gateway) for _ in range(cfg.depth))
        self.lqe_layers = nn.ModuleList(LQE(cfg.reg_max, cfg.act) for _ in range(cfg.depth))


class FDRDecoder(AnchorBuffers):
    """Encoder maps -> per-query class logits and boxes (upstream's ``DFINETransformer`` /
    ``DEIMTransformer``). Inference runs only up to the last layer."""

    def __init__(self, nc: int, cfg: FDRConfig) -> None:
        super().__init__()
        self.nc, self.cfg, self.num_queries = nc, cfg, cfg.num_queries
        self.logged: set[tuple[int, int]] = set()   # (queries, tokens) already logged as too few tokens
        self.depth, self.reg_max, self.strides = cfg.depth, cfg.reg_max, cfg.strides
        dim = cfg.dim
        self.up = nn.Parameter(torch.tensor([0.5]), requires_grad=False)
        scale_dtype = torch.int64 if cfg.integer_reg_scale else torch.float32
        self.reg_scale = nn.Parameter(torch.tensor([cfg.reg_scale], dtype=scale_dtype), requires_grad=False)
        self.register_anchor_buffers(level_shapes(cfg.imgsz, cfg.strides))
        self.input_proj = nn.ModuleList(
            nn.Identity() if c == dim else nn.Sequential(OrderedDict([
                ("conv", nn.Conv2d(c, dim, 1, bias=False)), ("norm", nn.BatchNorm2d(dim, eps=NORM_EPS))]))
            for c in cfg.feat_channels)
        self.decoder = FDRStack(cfg, self.up, self.reg_scale)
        # Row ``nc`` is the padding label of denoising slots without a box.
        self.denoising_class_embed = nn.Embedding(nc + 1, dim, padding_idx=nc)
        bins = 4 * (cfg.reg_max + 1)
        if cfg.deimv2:  # upstream's registration order is the state-dict order
            self.enc_output: nn.Module = nn.Identity()
            self.enc_score_head = nn.Linear(dim, nc)
            self.enc_bbox_head = MLP(dim, dim, 4, 3, act=cfg.mlp_act)
            self.query_pos_head = MLP(4, dim, dim, 3, act=cfg.mlp_act)
            self.pre_bbox_head = MLP(dim, dim, 4, 3, act=cfg.mlp_act)
            self.dec_score_head = nn.ModuleList(nn.Linear(dim, nc) for _ in range(cfg.depth))
        else:
            self.query_pos_head = MLP(4, 2 * dim, dim, 2, act=cfg.mlp_act)
            self.enc_output = nn.Sequential(OrderedDict([("proj", nn.Linear(dim, dim)), ("norm", nn.LayerNorm(dim))]))
            self.enc_score_head = nn.Linear(dim, nc)
            self.enc_bbox_head = MLP(dim, dim, 4, 3, act=cfg.mlp_act)
            self.dec_score_head = nn.ModuleList(nn.Linear(dim, nc) for _ in range(cfg.depth))
            self.pre_bbox_head = MLP(dim, dim, 4, 3, act=cfg.mlp_act)
        if cfg.share_bbox_head:
            shared = MLP(dim, dim, bins, 3, act=cfg.mlp_act)
            self.dec_bbox_head = nn.ModuleList(shared for _ in range(cfg.depth))
        else:
            self.dec_bbox_head = nn.ModuleList(MLP(dim, dim, bins, 3, act=cfg.mlp_act) for _ in range(cfg.depth))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Scores start at a 1 % prior, box heads at zero (queries start on their proposals), the
        denoising embeddings normal, the projections Xavier (upstream's initialisation)."""
        prior = prior_logit(0.01)
        nn.init.constant_(self.enc_score_head.bias, prior)
        for mlp in (self.enc_bbox_head, self.pre_bbox_head, *self.dec_bbox_head):
            mlp.zero_output()
        for head in self.dec_score_head:
            nn.init.constant_(head.bias, prior)  # type: ignore[arg-type]  # an nn.Linear's
        with torch.no_grad():
            self.denoising_class_embed.weight[:-1].normal_()
        if isinstance(self.enc_output, nn.Sequential):
            nn.init.xavier_uniform_(self.enc_output[0].weight)  # type: ignore[arg-type]  # an nn.Linear's
        for layer in self.query_pos_head.layers:
            nn.init.xavier_uniform_(layer.weight)  # type: ignore[arg-type]
        for proj in self.input_proj:
            if isinstance(proj, nn.Sequential):
                nn.init.xavier_uniform_(proj[0].weight)  # type: ignore[arg-type]

    # ----------------------------------------------------------------- stages
    def flatten_memory(self, feats: list[Tensor]) -> tuple[Tensor, list[tuple[int, int]]]:
        """Project each map and concatenate the tokens: ``[B, sum(h*w), dim]`` and the shapes."""
        tokens, shapes = [], []
        for proj, feat in zip(self.input_proj, feats):
            x = proj(feat)
            shapes.append((int(x.shape[2]), int(x.shape[3])))
            tokens.append(x.flatten(2).permute(0, 2, 1))
        return torch.cat(tokens, 1), shapes

    def select_queries(self, memory: Tensor, shapes: list[tuple[int, int]]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The encoder's top-k tokens: ``(content [B, Q, dim] detached, reference logits [B, Q, 4]
        detached, encoder logits [B, Q, nc], encoder boxes [B, Q, 4])``; the encoder's box head
        runs on the chosen tokens only."""
        anchors, valid = self.anchors_for(shapes, memory.device)
        content = self.enc_output(valid.to(memory.dtype) * memory)
        logits = self.enc_score_head(content)
        top = topk_tokens(logits, self.num_queries, shapes, self.strides, clamp=True, logged=self.logged)
        chosen = gather_tokens(content, top)
        anchor = gather_tokens(anchors.to(memory.dtype).expand(memory.shape[0], -1, -1), top)
        reference = self.enc_bbox_head(chosen) + anchor
        return chosen.detach(), reference.detach(), gather_tokens(logits, top), reference.sigmoid()

    # ----------------------------------------------------------------- passes
    def forward(self, feats: list[Tensor]) -> dict[str, Tensor]:
        """Inference: ``pred_logits [B, Q, nc]`` (raw) and ``pred_boxes [B, Q, 4]`` (cx, cy, w, h,
        normalised; not clamped) of the last layer. The same in train and eval mode."""
        memory, shapes = self.flatten_memory(feats)
        queries, reference, _, _ = self.select_queries(memory, shapes)
        out = self._refine(queries, reference, memory, shapes, None, every_layer=False)
        return {"pred_logits": out["logits"][-1], "pred_boxes": out["boxes"][-1]}

    def forward_train(self, feats: list[Tensor], denoising: DenoisingQueries) -> dict[str, Tensor]:
        """Training: every layer's outputs for the matching queries and the ``D`` denoising ones.

        Returns (``L`` layers, ``Q`` queries, ``R = 4 * (reg_max + 1)``): ``logits [L, B, Q, nc]``,
        ``boxes [L, B, Q, 4]``, ``corners [L, B, Q, R]`` (distribution logits), ``refs [B, Q, 4]``
        (the layers' common reference boxes), ``pre_logits``/``pre_boxes`` (layer 0's plain
        prediction), ``enc_logits``/``enc_boxes`` (the encoder's top-k), the same ``dn_*`` for the
        denoising queries, and ``up``/``reg_scale`` (the distribution's parameters).
        """
        memory, shapes = self.flatten_memory(feats)
        queries, reference, enc_logits, enc_boxes = self.select_queries(memory, shapes)
        # Embedded even when D == 0, so the embedding always takes part in the backward (DDP
        # without find_unused_parameters needs every parameter in every step's graph).
        dn_content = self.denoising_class_embed(denoising.labels).to(queries.dtype)
        queries = torch.cat((dn_content, queries), 1)
        reference = torch.cat((denoising.boxes_unact.to(reference.dtype), reference), 1)
        mask = denoising.attn_mask
        if mask is not None:  # built for num_queries; a small input may have selected fewer
            mask = mask[:queries.shape[1], :queries.shape[1]]
        out = self._refine(queries, reference, memory, shapes, mask, every_layer=True)
        d = denoising.num_queries
        result = {"enc_logits": enc_logits, "enc_boxes": enc_boxes, "up": self.up, "reg_scale": self.reg_scale}
        for key in ("logits", "boxes", "corners"):
            result[key], result[f"dn_{key}"] = out[key][:, :, d:], out[key][:, :, :d]
        for key in ("refs", "pre_logits", "pre_boxes"):
            result[key], result[f"dn_{key}"] = out[key][:, d:], out[key][:, :d]
        return result

    def _refine(self, queries: Tensor, reference_logits: Tensor, memory: Tensor, shapes: list[tuple[int, int]],
                attn_mask: Tensor | None, *, every_layer: bool) -> dict[str, Tensor]:
        """Run the layers (all with ``every_layer``, else up to the last and report only it)."""
        project = weighting_function(self.reg_max, self.up, self.reg_scale).to(queries.dtype)
        reference = reference_logits.sigmoid().to(queries.dtype)
        pos = self.query_pos_head(reference).clamp(min=-10, max=10)
        output = queries
        detached: Tensor | float = 0.0   # the previous layer's output, detached (none before layer 0)
        corners: Tensor | float = 0.0    # the previous layer's distribution logits, with gradient
        logits, boxes, all_corners = [], [], []
        pre_logits = pre_boxes = initial = queries.new_zeros(())
        for i, layer in enumerate(self.decoder.layers):
            if i > 0 and not self.cfg.deimv2:  # DEIMv2 embeds the initial references only
                pos = self.query_pos_head(reference).clamp(min=-10, max=10)
            output = layer(output, reference[:, :, None], memory, shapes, attn_mask, pos)
            if i == 0:
                pre_boxes = F.sigmoid(self.pre_bbox_head(output) + inverse_sigmoid(reference))
                pre_logits = self.dec_score_head[0](output)
                initial = pre_boxes.detach()
            layer_corners = self.dec_bbox_head[i](output + detached) + corners
            box = distance2bbox(initial, integral(layer_corners, project), self.reg_scale)
            if every_layer or i == self.depth - 1:
                logits.append(self.decoder.lqe_layers[i](self.dec_score_head[i](output), layer_corners))
                boxes.append(box)
                all_corners.append(layer_corners)
            corners = layer_corners
            reference, detached = box.detach(), output.detach()
        return {"logits": torch.stack(logits), "boxes": torch.stack(boxes), "corners": torch.stack(all_corners),
                "refs": initial, "pre_logits": pre_logits, "pre_boxes": pre_boxes}
