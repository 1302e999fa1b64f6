"""SAM's image-embedding cache: the encoder is nearly all of SAM's cost (ViT-H at 1024 px), and a
user prompting one picture again and again (Meta's ``SamPredictor.set_image`` once, ``predict``
many times) should pay for it once.

A cache entry is the preprocessed input batch and its embeddings. A call hits when its input is
equal, element for element, to a held one, on the same network with the same weights (the sum of
the parameters' in-place version counters, which ``load_state_dict``, an optimizer step or a
``copy_`` bump), dtype and device. The comparison costs one pass over the input, far less than an
encoder forward. A handful of entries are kept, least recently used first out.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

CAPACITY = 4


def weights_stamp(net: nn.Module) -> tuple[int, int]:
    """Which weights ``net`` holds now: its identity and its parameters' version counters."""
    return id(net), sum(p._version for p in net.parameters())


class EmbeddingCache:
    """Inputs -> embeddings of recent calls (``hits`` and ``misses`` count the lookups)."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[int, tuple[tuple[Any, ...], Tensor, Tensor]] = OrderedDict()
        self._next = 0
        self.hits = 0
        self.misses = 0

    def clear(self) -> None:
        self._entries.clear()

    def lookup(self, net: nn.Module, images: Tensor, forward: Callable[[Tensor], Tensor]) -> Tensor:
        """The embeddings of ``images``: held ones when an entry matches, else ``forward(images)``, kept."""
        key = (*weights_stamp(net), tuple(images.shape), images.dtype, images.device)
        for slot, (held_key, held_images, embeddings) in self._entries.items():
            if held_key == key and torch.equal(held_images, images):
                self._entries.move_to_end(slot)
                self.hits += 1
                return embeddings
        self.misses += 1
        embeddings = forward(images)
        self._entries[self._next] = (key, images.clone(), embeddings)
        self._next += 1
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)
        return embeddings

    def wrap(self, net: nn.Module, forward: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
        """``forward`` through the cache (what predict calls)."""
        return lambda images: self.lookup(net, images, forward)
