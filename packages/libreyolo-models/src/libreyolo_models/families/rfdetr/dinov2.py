"""RF-DETR's backbone encoder: a DINOv2-small ViT whose layers mostly attend inside windows.

The image is cut into ``patch``-pixel patches; the patch grid is cut into ``windows x windows``
windows, each carried as its own sequence (with its own copy of the class token) so attention
costs grow with the window, not the image. The three layers that follow a read-out (the 4th, 7th
and 10th) attend across the whole image instead: the windows of an image are joined into one sequence for it. The
outputs after layers 3, 6, 9 and 12, normalised and reassembled into ``[B, 384, H/p, W/p]`` maps,
feed the projector.

Module names are upstream's checkpoint keys (HuggingFace's DINOv2 naming: ``embeddings``,
``encoder.layer.N.attention.attention.query`` ...), below ``backbone.0.encoder.encoder``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .variants import OUT_LAYERS, VIT_DEPTH, VIT_HEADS, VIT_WIDTH

LN_EPS = 1e-6  # DINOv2's


class PatchEmbeddings(nn.Module):
    """``patch x patch`` pixels -> one token (a strided convolution)."""

    def __init__(self, patch: int, width: int) -> None:
        super().__init__()
        self.projection = nn.Conv2d(3, width, kernel_size=patch, stride=patch)

    def forward(self, x: Tensor) -> Tensor:
        return self.projection(x).flatten(2).transpose(1, 2)


class Embeddings(nn.Module):
    """Class token + patch tokens + learned positions, then cut into windows.

    ``position_embeddings`` holds a ``pe_size x pe_size`` grid (plus the class token's row); an
    image of another grid size reads it bicubically resampled (antialiased), as DINOv2 does.
    ``mask_token`` (masked-image pretraining) is never used here and is frozen, so every trainable
    parameter receives a gradient (DDP needs that); it stays in the state dict as a checkpoint key.
    """

    def __init__(self, patch: int, windows: int, pe_size: int, width: int = VIT_WIDTH) -> None:
        super().__init__()
        self.patch, self.windows, self.pe_size = patch, windows, pe_size
        self.cls_token = nn.Parameter(torch.zeros(1, 1, width))
        self.mask_token = nn.Parameter(torch.zeros(1, width), requires_grad=False)
        self.position_embeddings = nn.Parameter(torch.zeros(1, pe_size * pe_size + 1, width))
        self.patch_embeddings = PatchEmbeddings(patch, width)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        nn.init.trunc_normal_(self.position_embeddings, std=0.02)

    def positions(self, height: int, width: int) -> Tensor:
        """``[1, 1 + gh*gw, C]`` position rows for an image of ``height x width`` pixels."""
        gh, gw = height // self.patch, width // self.patch
        if gh * gw == self.pe_size**2 and height == width:
            return self.position_embeddings
        if torch.jit.is_tracing():
            return _untraced(lambda: self._resampled(gh, gw))
        return self._resampled(gh, gw)

    def _resampled(self, gh: int, gw: int) -> Tensor:
        table = self.position_embeddings
        grid = table[:, 1:].reshape(1, self.pe_size, self.pe_size, -1).permute(0, 3, 1, 2)
        grid = F.interpolate(grid.float(), size=(gh, gw), mode="bicubic", align_corners=False,
                             antialias=grid.device.type != "mps").to(table.dtype)
        return torch.cat((table[:, :1], grid.permute(0, 2, 3, 1).reshape(1, gh * gw, -1)), 1)

    def forward(self, x: Tensor) -> Tensor:
        """``[B, 3, H, W]`` -> ``[B * windows**2, 1 + tokens per window, C]``: windows ordered
        (image, window row, window column), each led by the class token."""
        b, _, height, width = x.shape
        tokens = self.patch_embeddings(x.to(self.patch_embeddings.projection.weight.dtype))
        tokens = torch.cat((self.cls_token.expand(b, -1, -1), tokens), 1) + self.positions(height, width)
        n = self.windows
        if n == 1:
            return tokens
        gh, gw = height // self.patch, width // self.patch
        grid = tokens[:, 1:].reshape(b * n, gh // n, n, gw // n, -1).permute(0, 2, 1, 3, 4)
        grid = grid.reshape(b * n * n, (gh // n) * (gw // n), -1)
        return torch.cat((tokens[:, :1].repeat(n * n, 1, 1), grid), 1)


def _untraced(compute: Callable[[], Tensor]) -> Tensor:
    """``compute()`` with the JIT tracer suspended, so an export records its result as a constant.

    The position table's antialiased bicubic resampling has no ONNX operator; for a traced export
    (one image size per file) the resampled table is a constant anyway. Uses torch's private
    tracer-state switches (what ``torch.jit`` itself uses); drop when exports move to
    ``torch.export``, where this becomes a plain constant fold.
    """
    set_state = getattr(torch._C, "_set_tracing_state")  # noqa: B009 - private, untyped
    state = torch._C._get_tracing_state()
    set_state(None)
    try:
        with torch.no_grad():
            return compute()
    finally:
        set_state(state)


class SelfAttention(nn.Module):
    """Multi-head softmax attention; ``query``/``key``/``value`` are checkpoint keys."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width)
        self.value = nn.Linear(width, width)

    def forward(self, x: Tensor) -> Tensor:
        b, n, c = x.shape
        q, k, v = (proj(x).view(b, n, self.heads, c // self.heads).transpose(1, 2)
                   for proj in (self.query, self.key, self.value))
        return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, c)


class AttentionOutput(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.dense = nn.Linear(width, width)

    def forward(self, x: Tensor) -> Tensor:
        return self.dense(x)


class Attention(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.attention = SelfAttention(width, heads)
        self.output = AttentionOutput(width)

    def forward(self, x: Tensor) -> Tensor:
        return self.output(self.attention(x))


class LayerScale(nn.Module):
    """A learned per-channel gain on a residual branch (``lambda1`` is the checkpoint key)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.lambda1 = nn.Parameter(torch.ones(width))

    def forward(self, x: Tensor) -> Tensor:
        return x * self.lambda1


class Mlp(nn.Module):
    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, width)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Layer(nn.Module):
    """Pre-norm transformer block with layer scale. ``windows_per_image`` > 1 with ``joined``:
    the image's windows attend as one sequence (then are cut apart again)."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width, eps=LN_EPS)
        self.attention = Attention(width, heads)
        self.layer_scale1 = LayerScale(width)
        self.norm2 = nn.LayerNorm(width, eps=LN_EPS)
        self.mlp = Mlp(width, 4 * width)
        self.layer_scale2 = LayerScale(width)

    def forward(self, x: Tensor, windows_per_image: int = 1, joined: bool = False) -> Tensor:
        h = self.norm1(x)
        if joined and windows_per_image > 1:
            bw, t, c = h.shape
            h = self.attention(h.reshape(bw // windows_per_image, windows_per_image * t, c)).reshape(bw, t, c)
        else:
            h = self.attention(h)
        x = x + self.layer_scale1(h)
        return x + self.layer_scale2(self.mlp(self.norm2(x)))


class LayerStack(nn.Module):
    def __init__(self, width: int, heads: int, depth: int) -> None:
        super().__init__()
        self.layer = nn.ModuleList(Layer(width, heads) for _ in range(depth))


class WindowedViT(nn.Module):
    """The ViT proper (upstream's ``WindowedDinov2WithRegistersBackbone``, built without registers)."""

    def __init__(self, patch: int, windows: int, pe_size: int) -> None:
        super().__init__()
        self.patch, self.windows = patch, windows
        self.embeddings = Embeddings(patch, windows, pe_size)
        self.encoder = LayerStack(VIT_WIDTH, VIT_HEADS, VIT_DEPTH)
        self.layernorm = nn.LayerNorm(VIT_WIDTH, eps=LN_EPS)
        # The layer right after each read-out (0-based 3, 6, 9) attends across the whole image;
        # the others inside their window (upstream: layer indices not in its window set).
        self.global_layers = frozenset(OUT_LAYERS[:-1])
        self.read_after = frozenset(i - 1 for i in OUT_LAYERS)

    def forward(self, x: Tensor) -> list[Tensor]:
        """``[B, 3, H, W]`` -> four ``[B, 384, H/p, W/p]`` maps (after layers 3, 6, 9, 12)."""
        b, _, height, width = x.shape
        block = self.patch * self.windows
        if height % block or width % block:
            raise ValueError(f"RF-DETR's backbone needs image sides that are multiples of {block} "
                             f"({self.patch}-pixel patches in {self.windows}x{self.windows} windows); "
                             f"got {height}x{width}")
        per_image = self.windows**2
        tokens = self.embeddings(x)
        maps = []
        for i, layer in enumerate(self.encoder.layer):
            tokens = layer(tokens, per_image, joined=i in self.global_layers)
            if i in self.read_after:
                maps.append(self._to_map(self.layernorm(tokens)[:, 1:], b, height // self.patch, width // self.patch))
        return maps

    def _to_map(self, tokens: Tensor, b: int, gh: int, gw: int) -> Tensor:
        """Window-major patch tokens -> ``[B, C, gh, gw]`` (undoing ``Embeddings``' cut)."""
        n = self.windows
        c = tokens.shape[-1]
        grid = tokens.reshape(b * n, n, gh // n, gw // n, c).permute(0, 2, 1, 3, 4)
        return grid.reshape(b, gh, gw, c).permute(0, 3, 1, 2).contiguous()


class DinoV2Encoder(nn.Module):
    """Holds the ViT under the attribute upstream's checkpoints name ``encoder``."""

    def __init__(self, patch: int, windows: int, pe_size: int) -> None:
        super().__init__()
        self.encoder = WindowedViT(patch, windows, pe_size)

    def forward(self, x: Tensor) -> list[Tensor]:
        return self.encoder(x)
