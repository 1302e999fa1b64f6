"""Weight-only int8 linear layers: what ``model.quantize("int8")`` puts in place of ``nn.Linear``.

Each output row of the weight is stored as int8 with one float scale (symmetric, per output
channel: ``w ~= int8 * scale``, ``scale = max|row| / 127``), and the forward dequantizes it in the
input's dtype before an ordinary ``F.linear``. Why weight-only, in plain torch, rather than
``torch.ao.quantization.quantize_dynamic``: that API is deprecated in the torch this project uses
(2.15 warns that it moves to torchao), its modules run on the CPU only and pack their weights into
objects of their own; these layers run on any device, a CUDA graph captures them like any other
kernels (the dequantization is two elementwise ops), and their state is plain tensors. What it
buys is storage (a quarter of fp32 for the linear weights); the arithmetic stays floating point.

The buffers are named ``weight_int8`` and ``weight_scale``, not ``weight``: code that reads a
Linear's ``weight`` outside its forward (``nn.MultiheadAttention`` does, and a family may) then
fails loudly instead of multiplying by unscaled integers, and the quantizer refuses.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

INT8_MAX = 127


class Int8Linear(nn.Module):
    """``nn.Linear`` with int8 weights (one scale per output channel), dequantized per call."""

    weight_int8: Tensor
    weight_scale: Tensor
    bias: Tensor | None

    def __init__(self, in_features: int, out_features: int, *, bias: bool, device: torch.device | None = None,
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("weight_int8", torch.zeros(out_features, in_features, dtype=torch.int8, device=device))
        self.register_buffer("weight_scale", torch.ones(out_features, 1, dtype=dtype, device=device))
        self.register_buffer("bias", torch.zeros(out_features, dtype=dtype, device=device) if bias else None)

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> Int8Linear:
        """The int8 twin of ``linear`` (its bias kept in full precision), on its device."""
        weight = linear.weight.detach().float()
        scale = weight.abs().amax(dim=1, keepdim=True).clamp(min=torch.finfo(torch.float32).tiny) / INT8_MAX
        out = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, device=weight.device,
                  dtype=linear.weight.dtype)
        out.weight_int8.copy_(torch.round(weight / scale).clamp_(-INT8_MAX, INT8_MAX).to(torch.int8))
        out.weight_scale.copy_(scale)
        if linear.bias is not None and out.bias is not None:
            out.bias.copy_(linear.bias.detach())
        return out

    def to_linear(self) -> nn.Linear:
        """An ``nn.Linear`` of the same shape on the same device (weights dequantized; callers that
        kept the original weights load them over these)."""
        linear = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None,
                           device=self.weight_int8.device, dtype=self.weight_scale.dtype)
        with torch.no_grad():
            linear.weight.copy_(self.dequantized(self.weight_scale.dtype))
            if self.bias is not None:
                linear.bias.copy_(self.bias)
        return linear

    def dequantized(self, dtype: torch.dtype) -> Tensor:
        return self.weight_int8.to(dtype) * self.weight_scale.to(dtype)

    def forward(self, x: Tensor) -> Tensor:
        bias = self.bias.to(x.dtype) if self.bias is not None else None
        return F.linear(x, self.dequantized(x.dtype), bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def quantizable_linears(net: nn.Module) -> list[nn.Linear]:
    """The distinct ``nn.Linear`` modules (exactly that type: subclasses such as attention's output
    projection are read by their owners directly) outside ``nn.MultiheadAttention``, in order."""
    inside_attention = {id(m) for a in net.modules() if isinstance(a, nn.MultiheadAttention) for m in a.modules()}
    found: dict[int, nn.Linear] = {}
    for module in net.modules():
        if type(module) is nn.Linear and id(module) not in inside_attention:
            found.setdefault(id(module), module)
    return list(found.values())


def linear_share(net: nn.Module) -> float:
    """The fraction of ``net``'s parameters held by :func:`quantizable_linears` (0.0 without any)."""
    total = sum(p.numel() for p in net.parameters())
    linear = sum(p.numel() for m in quantizable_linears(net) for p in m.parameters(recurse=False))
    return linear / total if total else 0.0


def swap_modules(net: nn.Module, replace: dict[int, nn.Module]) -> list[str]:
    """Put ``replace[id(child)]`` wherever such a child sits (a module reachable under several
    names is replaced under every one); returns the dotted names replaced."""
    names = []
    for parent_name, parent in net.named_modules(remove_duplicate=False):
        for name, child in list(parent._modules.items()):
            if child is not None and id(child) in replace:
                parent._modules[name] = replace[id(child)]
                names.append(f"{parent_name}.{name}" if parent_name else name)
    return names


def quantize_linears(net: nn.Module) -> list[str]:
    """Replace every quantizable ``nn.Linear`` of ``net`` by its :class:`Int8Linear` in place."""
    return swap_modules(net, {id(m): Int8Linear.from_linear(m) for m in quantizable_linears(net)})


def restore_linears(net: nn.Module) -> list[str]:
    """Replace every :class:`Int8Linear` by an ``nn.Linear`` of its shape in place (weights are
    the dequantized ones: load the originals over them)."""
    int8 = {id(m): m for m in net.modules() if isinstance(m, Int8Linear)}
    return swap_modules(net, {key: m.to_linear() for key, m in int8.items()})
