"""The small fully-connected heads every DETR decoder uses (box heads, query position heads)."""

from __future__ import annotations

from torch import Tensor, nn

ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "silu": nn.SiLU, "gelu": nn.GELU}


def activation(name: str) -> nn.Module:
    """``"relu"``, ``"silu"`` or ``"gelu"`` as a module (upstream's configs name them)."""
    if name not in ACTIVATIONS:
        raise ValueError(f"activation {name!r} is not one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]()


class MLP(nn.Module):
    """``depth`` linear layers with ``act`` between them (none after the last); key ``layers.<i>``."""

    def __init__(self, c_in: int, hidden: int, c_out: int, depth: int, act: str = "relu") -> None:
        super().__init__()
        widths = [c_in] + [hidden] * (depth - 1) + [c_out]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.act = activation(act)

    def forward(self, x: Tensor) -> Tensor:
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x = layer(x) if i == last else self.act(layer(x))
        return x

    def zero_output(self) -> None:
        """Zero the last layer, so the head starts by predicting 0 (a box on its reference)."""
        last = self.layers[-1]
        assert isinstance(last, nn.Linear)
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)
