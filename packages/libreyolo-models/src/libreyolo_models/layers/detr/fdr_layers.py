"""The decoder layer and quality head of D-FINE's decoder (shared by DEIM, RT-DETRv4, DEIMv2).

Two upstream styles: D-FINE's (LayerNorm, a gated fusion of the cross-attention output, ReLU or
SiLU feed-forward) and DEIMv2's (RMSNorm, SwiGLU feed-forward, the gate optional). Module names
are upstream's checkpoint keys (``norm1``, ``cross_attn``, ``gateway.gate``, ``linear1``,
``swish_ffn.w12``, ``lqe_layers.<i>.reg_conf``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .deformable import MSDeformableAttention
from .determinism import needs_deterministic_backward
from .mlp import MLP, activation

FP16_MAX = 65504.0


class RMSNorm(nn.Module):
    """``x / rms(x) * scale``, computed in float32 whatever the input's dtype (DEIMv2; eps 1e-6).
    The weight is ``scale`` (upstream's key), not ``weight``."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        y = x.float()
        return (y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.scale


class Gate(nn.Module):
    """``norm(g1 * x1 + g2 * x2)`` with sigmoid gates from both inputs, starting at one half each:
    how much of the cross-attention result replaces the query's own content."""

    def __init__(self, dim: int, rms: bool = False) -> None:
        super().__init__()
        self.gate = nn.Linear(2 * dim, 2 * dim)
        self.norm: nn.Module = RMSNorm(dim) if rms else nn.LayerNorm(dim)
        nn.init.zeros_(self.gate.weight)
        nn.init.constant_(self.gate.bias, 0.0)  # logit of a 0.5 prior

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        g1, g2 = torch.sigmoid(self.gate(torch.cat((x1, x2), -1))).chunk(2, dim=-1)
        return self.norm(g1 * x1 + g2 * x2)


class SwiGLUFFN(nn.Module):
    """``w3(silu(a) * b)`` with ``(a, b) = w12(x)`` halves (DEIMv2's feed-forward)."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w12 = nn.Linear(dim, 2 * hidden)
        self.w3 = nn.Linear(hidden, dim)
        for layer in (self.w12, self.w3):
            nn.init.xavier_uniform_(layer.weight)
            nn.init.zeros_(layer.bias)

    def forward(self, x: Tensor) -> Tensor:
        a, b = self.w12(x).chunk(2, dim=-1)
        return self.w3(F.silu(a) * b)


class FDRDecoderLayer(nn.Module):
    """Self-attention among queries, deformable cross-attention into the (unprojected) memory,
    fused by the gate (or added and normalised), then the feed-forward; post-norm.

    Args:
        dim, heads, ffn, levels, points: widths, attention heads, memory levels, points per level.
        act: the feed-forward activation (D-FINE style).
        rms: DEIMv2 style (RMSNorm, SwiGLU feed-forward of ``ffn // 2`` hidden units).
        gateway: fuse the cross-attention result with the gate (D-FINE always; DEIMv2 n-x).
    """

    def __init__(self, dim: int, heads: int, ffn: int, levels: int, points: list[int], *, act: str = "relu",
                 rms: bool = False, gateway: bool = True) -> None:
        super().__init__()
        self.rms, self.use_gateway = rms, gateway
        self.self_attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm1: nn.Module = RMSNorm(dim) if rms else nn.LayerNorm(dim)
        self.cross_attn = MSDeformableAttention(dim, heads, levels, points, projections=False, scale_buffer=True)
        if gateway:
            self.gateway = Gate(dim, rms=rms)
        else:
            self.norm2 = RMSNorm(dim) if rms else nn.LayerNorm(dim)
        if rms:
            self.swish_ffn = SwiGLUFFN(dim, ffn // 2)
        else:
            self.linear1 = nn.Linear(dim, ffn)
            self.act = activation(act)
            self.linear2 = nn.Linear(ffn, dim)
            nn.init.xavier_uniform_(self.linear1.weight)
            nn.init.xavier_uniform_(self.linear2.weight)
        self.norm3: nn.Module = RMSNorm(dim) if rms else nn.LayerNorm(dim)

    def forward(self, tgt: Tensor, reference: Tensor, memory: Tensor, shapes: list[tuple[int, int]],
                attn_mask: Tensor | None, query_pos: Tensor) -> Tensor:
        q = k = tgt + query_pos
        exact = needs_deterministic_backward(tgt)  # plain matmul + softmax; else fused SDPA
        tgt = self.norm1(tgt + self.self_attn(q, k, tgt, attn_mask=attn_mask, need_weights=exact)[0])
        attended = self.cross_attn(tgt + query_pos, reference, memory, shapes)
        tgt = self.gateway(tgt, attended) if self.use_gateway else self.norm2(tgt + attended)
        ffn = self.swish_ffn(tgt) if self.rms else self.linear2(self.act(self.linear1(tgt)))
        return self.norm3((tgt + ffn).clamp(min=-FP16_MAX, max=FP16_MAX))


class LQE(nn.Module):
    """Localisation quality estimate: a class-score correction from the shape of each edge's
    distribution (its ``k`` largest probabilities and their mean): a peaked distribution means a
    confident box, which should score higher."""

    def __init__(self, reg_max: int, act: str, k: int = 4, hidden: int = 64) -> None:
        super().__init__()
        self.k, self.reg_max = k, reg_max
        self.reg_conf = MLP(4 * (k + 1), hidden, 1, 2, act=act)
        self.reg_conf.zero_output()

    def forward(self, scores: Tensor, corners: Tensor) -> Tensor:
        b, q, _ = corners.shape
        prob = F.softmax(corners.reshape(b, q, 4, self.reg_max + 1), dim=-1)
        top = prob.topk(self.k, dim=-1).values
        stat = torch.cat((top, top.mean(dim=-1, keepdim=True)), -1)
        return scores + self.reg_conf(stat.reshape(b, q, -1))


def prior_logit(p: float) -> float:
    """The logit whose sigmoid is ``p`` (focal-loss bias initialisation)."""
    return -math.log((1 - p) / p)
