"""The PP-OCRv4 mobile line recogniser: PP-LCNetV3 (x0.95, width-keeping strides), an SVTR encoder
(two global-attention blocks between convolutions, with a guide shortcut) and a CTC classifier."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .lcnet import BlockSpec, LCNetV3

_S1, _S2, _H2, _W2 = (1, 1), (2, 2), (2, 1), (1, 2)

REC_STAGES: tuple[tuple[BlockSpec, ...], ...] = (
    (BlockSpec(3, 16, 32, _S1),),
    (BlockSpec(3, 32, 64, _S1), BlockSpec(3, 64, 64, _S1)),
    (BlockSpec(3, 64, 128, _H2), BlockSpec(3, 128, 128, _S1)),
    (BlockSpec(3, 128, 240, _W2),) + (BlockSpec(5, 240, 240, _S1),) * 4,
    (BlockSpec(5, 240, 480, _H2, se=True), BlockSpec(5, 480, 480, _S1, se=True),
     BlockSpec(5, 480, 480, _H2), BlockSpec(5, 480, 480, _S1)),
)
REC_HEIGHT = 48     # the recogniser's input height: the pooled feature is then one row high
DIMS, HEADS, DEPTH = 120, 8, 2


class ConvBNSwish(nn.Module):
    def __init__(self, cin: int, cout: int, kernel: tuple[int, int]) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, 1, (kernel[0] // 2, kernel[1] // 2), bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x: Tensor) -> Tensor:
        return F.silu(self.bn(self.conv(x)))


class Attention(nn.Module):
    def __init__(self, dims: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.scale = (dims // heads) ** -0.5
        self.qkv = nn.Linear(dims, dims * 3)
        self.proj = nn.Linear(dims, dims)

    def forward(self, x: Tensor) -> Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        attn = torch.softmax((q * self.scale) @ k.transpose(-2, -1), dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))


class EncoderBlock(nn.Module):
    """Pre-norm transformer block: global attention, then an MLP (x2, swish)."""

    def __init__(self, dims: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dims, eps=1e-5)
        self.attn = Attention(dims, heads)
        self.norm2 = nn.LayerNorm(dims, eps=1e-5)
        self.fc1 = nn.Linear(dims, dims * 2)
        self.fc2 = nn.Linear(dims * 2, dims)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(F.silu(self.fc1(self.norm2(x))))


class SVTRRecognizer(nn.Module):
    """Normalised BGR ``[B, 3, 48, W]`` -> per-column class probabilities ``[B, W / 8, classes]``
    (class 0 is the CTC blank, the last a space)."""

    def __init__(self, classes: int) -> None:
        super().__init__()
        self.backbone = LCNetV3(16, REC_STAGES)
        width = REC_STAGES[-1][-1].cout
        self.conv1 = ConvBNSwish(width, width // 8, (1, 3))
        self.conv2 = ConvBNSwish(width // 8, DIMS, (1, 1))
        self.blocks = nn.ModuleList(EncoderBlock(DIMS, HEADS) for _ in range(DEPTH))
        self.norm = nn.LayerNorm(DIMS, eps=1e-5)
        self.conv3 = ConvBNSwish(DIMS, width, (1, 1))
        self.conv4 = ConvBNSwish(width * 2, width // 8, (1, 3))
        self.conv5 = ConvBNSwish(width // 8, DIMS, (1, 1))
        self.classifier = nn.Linear(DIMS, classes)

    def forward(self, x: Tensor) -> Tensor:
        guide = F.avg_pool2d(self.backbone(x)[-1], (3, 2), (3, 2))
        z = self.conv2(self.conv1(guide))
        b, c, h, w = z.shape
        seq = z.flatten(2).transpose(1, 2)
        for block in self.blocks:
            seq = block(seq)
        z = self.conv3(self.norm(seq).reshape(b, h, w, c).permute(0, 3, 1, 2))
        z = self.conv5(self.conv4(torch.cat([guide, z], 1)))
        return torch.softmax(self.classifier(z.squeeze(2).transpose(1, 2)), dim=2)
