"""Inference fusion: fold each BatchNorm into the convolution before it, and merge re-parameterizable
branches (RepConvN's 3x3 + 1x1) into one convolution.

Why: at small batch the network is bound by the number of kernels it launches, and a CUDA graph
replays every one of them; fusing removes a BatchNorm kernel per convolution and one convolution per
RepConvN. The folded weights are computed in float64, so a fused network agrees with the unfused one
to rounding (about 1e-6 relative in fp32), but not bit for bit, and it can no longer train. So the
model never fuses its own network: :func:`fused_copy` builds a separate inference copy (what
``LibreYOLO.fused_net`` holds) that shares every parameter fusion leaves alone. Modules take part by
defining ``fuse_for_inference()``, which must replace the modules it folds rather than write into
their tensors (those are shared with the original); :func:`fuse_network` calls it on every module,
children before parents, so a parent can merge children that are already folded.
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn


def fold_batchnorm(conv: nn.Conv2d, bn: nn.BatchNorm2d) -> nn.Conv2d:
    """A new convolution (with bias) equal to ``bn(conv(x))`` with ``bn`` in eval mode."""
    if bn.running_mean is None or bn.running_var is None:
        raise ValueError(f"cannot fold {bn}: it tracks no running statistics")
    kernel, stride, dilation = _pair(conv.kernel_size), _pair(conv.stride), _pair(conv.dilation)
    padding: str | tuple[int, int] = conv.padding if isinstance(conv.padding, str) else _pair(conv.padding)
    fused = nn.Conv2d(conv.in_channels, conv.out_channels, kernel, stride, padding, dilation, conv.groups, bias=True,
                      padding_mode=conv.padding_mode, device=conv.weight.device, dtype=conv.weight.dtype)
    assert fused.bias is not None  # built with bias=True
    with torch.no_grad():
        w = conv.weight.double()
        b = conv.bias.double() if conv.bias is not None else torch.zeros(conv.out_channels, dtype=torch.float64,
                                                                         device=w.device)
        gamma = bn.weight.double() if bn.weight is not None else torch.ones_like(b)
        beta = bn.bias.double() if bn.bias is not None else torch.zeros_like(b)
        scale = gamma / torch.sqrt(bn.running_var.double() + bn.eps)
        fused.weight.copy_(w * scale.view(-1, 1, 1, 1))
        fused.bias.copy_(beta + (b - bn.running_mean.double()) * scale)
    fused.weight.requires_grad_(False)
    fused.bias.requires_grad_(False)
    return fused


def merge_parallel_convs(big: nn.Conv2d, small: nn.Conv2d) -> None:
    """Add ``small``'s kernel (centred, zero-padded) and bias into ``big``, in place, so that
    ``big(x)`` afterwards equals ``big(x) + small(x)``. Both need a bias, equal stride, groups
    and dilation 1, and paddings that keep their outputs aligned."""
    kb, ks = _pair(big.kernel_size), _pair(small.kernel_size)
    pad = [(kb[i] - ks[i]) // 2 for i in (0, 1)]
    if (isinstance(big.padding, str) or isinstance(small.padding, str) or big.stride != small.stride
            or big.groups != small.groups or big.dilation != (1, 1)
            or small.dilation != (1, 1) or any(p < 0 or (kb[i] - ks[i]) % 2 for i, p in enumerate(pad))
            or tuple(_pair(big.padding)[i] - _pair(small.padding)[i] for i in (0, 1)) != tuple(pad)
            or big.bias is None or small.bias is None):
        raise ValueError(f"cannot merge {small} into {big}: their outputs are not aligned")
    with torch.no_grad():
        big.weight.add_(nn.functional.pad(small.weight, [pad[1], pad[1], pad[0], pad[0]]))
        big.bias.add_(small.bias)


def fuse_network(net: nn.Module) -> int:
    """Fuse every module of ``net`` that supports it, in place; returns how many did something.

    ``net`` is put in eval mode first (fusion bakes in the running statistics).
    """
    net.eval()
    fused = 0
    for module in _children_first(net):
        hook = getattr(module, "fuse_for_inference", None)
        if callable(hook) and hook():
            fused += 1
    return fused


def fused_copy(net: nn.Module) -> tuple[nn.Module, int]:
    """A fused inference copy of ``net`` (eval mode) and how many modules fused; ``net`` is untouched.

    The copy's modules are new objects, but its parameters are ``net``'s own until fusion
    replaces them: memory grows by the folded convolutions only, never by a second full network,
    not even for a moment. Buffers are copied (small, and what graph warmup restores in place:
    shared ones would look like new weights to ``net``'s watchers). A fuse hook that wrote into a
    shared parameter would change ``net``'s weights; that is caught here (tensor versions) and
    raised as a bug of the hook.
    """
    tensors = weight_tensors(net)
    memo: dict[int, object] = {id(p): p for p in net.parameters()}
    versions = [t._version for t in tensors]
    copied = copy.deepcopy(net, memo)
    count = fuse_network(copied)
    changed = [i for i, (t, v) in enumerate(zip(tensors, versions)) if t._version != v]
    if changed:
        raise RuntimeError(f"fusing {type(net).__name__} wrote into {len(changed)} of its original tensors; a "
                           "fuse_for_inference() hook must build new modules instead of changing shared weights")
    return copied, count


def weight_tensors(net: nn.Module) -> list[Tensor]:
    """Every parameter and buffer of ``net`` in module order (shared ones once per owner; cheap:
    reads the modules' dicts instead of ``named_parameters``' de-duplicating walk)."""
    out: list[Tensor] = []
    stack = [net]
    while stack:
        module = stack.pop()
        out.extend(t for t in module._parameters.values() if t is not None)
        out.extend(t for t in module._buffers.values() if t is not None)
        stack.extend(reversed([m for m in module._modules.values() if m is not None]))
    return out


def _children_first(module: nn.Module) -> list[nn.Module]:
    order: list[nn.Module] = []
    for child in module.children():
        order.extend(_children_first(child))
    order.append(module)
    return order


def _pair(value: int | tuple[int, ...]) -> tuple[int, int]:
    """A 2-d convolution's size argument as ``(h, w)``."""
    if isinstance(value, int):
        return value, value
    return int(value[0]), int(value[1])
