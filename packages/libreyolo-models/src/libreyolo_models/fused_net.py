"""The fused inference copy of a model's network, kept only while the network's weights stay put.

Predict runs BatchNorm-folded networks by default where the family declares fusing
(``TaskDecl.inference_fuse``): fewer kernels, about half the eager latency of YOLOv9-t at batch 1.
The model itself stays trainable and savable because its own network is never fused: the fused
network is a separate copy (``layers.fuse.fused_copy``, which shares every parameter fusion leaves
alone), built on first use and dropped whenever the weights it was folded from may have changed.

Two guards keep it from going stale:

- the facade drops it on every event that changes weights (``train``, ``load``, ``rebuild``,
  ``to``, ``float``, ``fuse(False)``) and casts it with the network on ``half()``;
- before each use, :class:`FusedNetwork` compares a stamp of a sample of the network's tensors
  (address and version counter): the first and last parameters and buffers, and the batch
  counters of BatchNorm layers spread over the network. ``load_state_dict`` and optimizer steps
  write every tensor, a training-mode forward counts a batch in every BatchNorm, and a move or
  cast replaces the tensors: each changes the stamp. A whole-network stamp would cost ~1 ms per
  call on YOLOv9-t; the sample costs microseconds. What it cannot see (a single weight edited
  through ``tensor.data``, a fused optimizer step without a forward) is what ``fuse(True)``
  is for: it always folds anew.
"""

from __future__ import annotations

import copy
import logging

import torch
from torch import nn

from .layers.fuse import fused_copy
from .layers.layout import own_channels_last

log = logging.getLogger(__name__)

Stamp = tuple[tuple[int, int], ...]
Slot = tuple[dict, str]

BATCHNORM_SAMPLES = 8
"""BatchNorm batch counters in the stamp, spread evenly over the network."""


def stamp_slots(net: nn.Module) -> list[Slot]:
    """Where the stamp's tensors live (module dict, key), read anew at every check so a
    replaced tensor is seen."""
    params: list[Slot] = []
    buffers: list[Slot] = []
    counters: list[Slot] = []
    for module in net.modules():
        params += [(module._parameters, k) for k, v in module._parameters.items() if v is not None]
        buffers += [(module._buffers, k) for k, v in module._buffers.items() if v is not None]
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.num_batches_tracked is not None:
            counters.append((module._buffers, "num_batches_tracked"))
    step = max(1, len(counters) // BATCHNORM_SAMPLES)
    ends = [*params[:1], *params[-1:], *buffers[:1], *buffers[-1:]]
    return ends + counters[::step][:BATCHNORM_SAMPLES] + counters[-1:]


def weights_stamp(slots: list[Slot]) -> Stamp:
    """(address, version) of each sampled tensor (0, -1 for one that is gone)."""
    out = []
    for entries, key in slots:
        t = entries.get(key)
        out.append((t.data_ptr(), t._version) if t is not None else (0, -1))
    return tuple(out)


class FusedNetwork:
    """Holds at most one fused copy of a network (and its channels_last twin, derived on demand)
    and knows whether it still matches the source."""

    def __init__(self) -> None:
        self.net: nn.Module | None = None
        self.last: nn.Module | None = None
        self.source: nn.Module | None = None
        self.modules_fused = 0
        self._slots: list[Slot] = []
        self._stamp: Stamp = ()

    def stale(self, source: nn.Module) -> bool:
        """True when a copy is held but was built from another network, or ``source``'s sampled
        tensors moved or were written since."""
        if self.net is None:
            return False
        return source is not self.source or weights_stamp(self._slots) != self._stamp

    def build(self, source: nn.Module) -> nn.Module:
        """Fold ``source`` into a new copy (on its device and dtype) and remember its stamp."""
        self.net, self.modules_fused = fused_copy(source)
        self.last = None
        self.source, self._slots = source, stamp_slots(source)
        self._stamp = weights_stamp(self._slots)
        log.debug("fused inference copy built: %d modules folded", self.modules_fused)
        return self.net

    def channels_last(self) -> nn.Module:
        """The held copy in channels_last (``layers.layout``): the same weights, its convolution
        kernels NHWC tensors of its own, everything else shared with the copy. Built on first use."""
        if self.net is None:
            raise RuntimeError("FusedNetwork.channels_last(): no fused copy is held; build() one first")
        if self.last is None:
            twin = copy.deepcopy(self.net, {id(p): p for p in self.net.parameters()})
            own_channels_last(twin)
            self.last = twin.eval()
        return self.last

    def half(self) -> None:
        """The source was cast to fp16: cast the copies along (folded from fp32, rounded once)."""
        self.to(torch.float16)

    def to(self, dtype: torch.dtype) -> None:
        """The source was cast to ``dtype``: cast the copies along (folded before, rounded once)."""
        for net in (self.net, self.last):
            if net is not None:
                net.to(dtype)
        if self.net is not None:
            self._stamp = weights_stamp(self._slots)

    def drop(self) -> bool:
        """Forget the copies (their memory goes back to the allocator); True when there was one."""
        held = self.net is not None
        self.net, self.last, self.source, self.modules_fused, self._slots, self._stamp = None, None, None, 0, [], ()
        return held
