"""Snapshot and restore the state a warmup or a parity run would otherwise change.

Warmup runs the real forward a few times before capture. In training mode that updates
BatchNorm running statistics and ``num_batches_tracked``; with dropout it consumes random
numbers. Capturing must leave the model exactly as it was, so both are restored afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn


def _buffers_of(modules: tuple[nn.Module | None, ...]) -> list[Tensor]:
    seen: set[int] = set()
    found: list[Tensor] = []
    for module in modules:
        if module is None:
            continue
        for buf in module.buffers():
            if id(buf) not in seen:
                seen.add(id(buf))
                found.append(buf)
    return found


@contextmanager
def preserved_state(*modules: nn.Module | None) -> Iterator[None]:
    """Restore every buffer of ``modules`` and the CPU and current-device CUDA RNG states on exit.

    All buffers are covered, not only BatchNorm's (running_mean, running_var and
    num_batches_tracked): any buffer a forward mutates would otherwise drift. Values are copied
    back in place, so storage addresses (which a captured graph has baked in) do not change.
    The restore runs even when the block raises.

    Args:
        *modules: modules whose buffers to restore; ``None`` entries are ignored, so callers can
            pass an optional module straight through.
    """
    buffers = _buffers_of(modules)
    with torch.no_grad():
        saved = [b.detach().clone() for b in buffers]
    cpu_rng = torch.get_rng_state()
    # The current device's generator only: warmup runs there, and reading every device's state
    # would touch devices this process never used.
    cuda_rng = torch.cuda.get_rng_state() if torch.cuda.is_initialized() else None
    try:
        yield
    finally:
        with torch.no_grad():
            for buf, value in zip(buffers, saved):
                buf.copy_(value)
        torch.set_rng_state(cpu_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state(cuda_rng)
