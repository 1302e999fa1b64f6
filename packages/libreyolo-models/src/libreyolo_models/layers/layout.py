"""Memory layout of inference networks: the fused copy's channels_last (NHWC) twin.

Why: cuDNN runs NHWC convolutions on the tensor cores without transposing each input first, and
predict's letterbox is already NHWC in memory (decoded ``H, W, 3`` pixels seen channels-first), so
the input needs no copy either. Inference with fp16 weights on CUDA runs this twin
(``LibreYOLO.fused_channels_last`` has the measurements: 12-17 % faster graphed in fp16).

The fused copy shares the parameters fusion leaves alone with the model's own network; a layout
change in place would reach into that network (``Module.to`` rewrites ``param.data``), so the twin
gets channels_last tensors of its own and every other network keeps its layout.
"""

from __future__ import annotations

import torch
from torch import nn


def own_channels_last(net: nn.Module) -> int:
    """Give every 4-D parameter and buffer of ``net`` a channels_last tensor of its own (new
    ``Parameter`` objects, so a parameter shared with another network stays as it is there);
    returns how many were replaced."""
    count = 0
    for module in net.modules():
        for name, p in list(module._parameters.items()):
            if p is not None and p.dim() == 4:
                fresh = nn.Parameter(p.detach().contiguous(memory_format=torch.channels_last),
                                     requires_grad=p.requires_grad)
                module._parameters[name] = fresh
                count += 1
        for name, b in list(module._buffers.items()):
            if b is not None and b.dim() == 4:
                module._buffers[name] = b.contiguous(memory_format=torch.channels_last)
                count += 1
    return count


def is_channels_last(net: nn.Module) -> bool:
    """Whether ``net`` runs in channels_last, read from its first parameter (the stem's kernel in a
    detector): one check per call, microseconds. A kernel that is contiguous both ways (a 1x1
    convolution over one channel) reads as NCHW: either layout serves it."""
    p = next(net.parameters(), None)
    return (p is not None and p.dim() == 4 and not p.is_contiguous()
            and p.is_contiguous(memory_format=torch.channels_last))
