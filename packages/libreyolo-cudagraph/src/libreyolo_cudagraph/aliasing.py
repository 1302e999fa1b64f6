"""Run a module with stand-in tensors for its parameters, and put the parameters back exactly.

``torch.func.functional_call`` does not do the second half for weights that are shared: when one
``nn.Conv2d`` sits under several names (RTMDet's head shares its convs across levels) or one
``Parameter`` is registered in two modules, its restore writes the stand-in back under all but
one of the names, so the module keeps a plain tensor where its ``Parameter`` was. The optimizer
still holds the ``Parameter``; eager steps then send their gradients to the stand-in and the
optimizer never sees them. (Checked against torch 2.11 and 2.15.) This module swaps by identity,
each (module, attribute) slot once, and restores every slot in a ``finally``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from torch import Tensor, nn


@contextmanager
def parameters_replaced(module: nn.Module, replacements: Mapping[int, Tensor]) -> Iterator[None]:
    """Within the block, every parameter slot of ``module`` that holds a tensor whose ``id`` is a key
    of ``replacements`` holds the mapped tensor instead; shared modules and tied parameters
    included. Afterwards every slot holds its original ``Parameter`` again."""
    swapped: list[tuple[dict[str, Any], str, Tensor]] = []
    try:
        for sub in module.modules():  # each distinct module once, however many names it has
            slots: dict[str, Any] = sub._parameters  # holds plain tensors while swapped
            for attr, tensor in slots.items():
                if tensor is not None and id(tensor) in replacements:
                    swapped.append((slots, attr, tensor))
        for slots, attr, tensor in swapped:
            slots[attr] = replacements[id(tensor)]
        yield
    finally:
        for slots, attr, tensor in swapped:
            slots[attr] = tensor
