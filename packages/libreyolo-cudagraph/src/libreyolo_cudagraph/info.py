"""Frozen snapshots that runners hand out from ``info()``: what is captured and what ran eager."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class GraphInfo:
    """One captured graph.

    Attributes:
        signature: readable cache key (input shapes/dtypes/layout/device, mode, autocast).
        replays: how many calls it served.
        capture_ms: wall time of warmup plus capture, i.e. what the first call paid.
        pool_bytes: growth of the device's reserved memory during the capture (graphs of one
            runner share a pool, so a later graph may need less than an earlier one).
    """

    signature: str
    replays: int
    capture_ms: float
    pool_bytes: int


@dataclass(frozen=True)
class RunnerInfo:
    """State of a :class:`~libreyolo_cudagraph.GraphRunner` at one moment.

    Attributes:
        name: the runner's name (for logs).
        mode: ``"off"``, ``"on"`` or ``"auto"``.
        graphs: captured graphs, least recently used first.
        fallbacks: reason -> number of calls that ran eager for it.
        eager_calls: calls that ran eager for any reason (policy included: mode off, first
            sight in auto mode).
        evictions: graphs dropped to stay under ``max_graphs``.
        evicted: signatures of the most recent evictions (at most 16).
        invalidations: times every graph was dropped (``invalidate()`` or moved storage).
        last_invalidation: the reason of the latest one.
    """

    name: str
    mode: str
    graphs: tuple[GraphInfo, ...]
    fallbacks: Mapping[str, int] = field(default_factory=dict)
    eager_calls: int = 0
    evictions: int = 0
    evicted: tuple[str, ...] = ()
    invalidations: int = 0
    last_invalidation: str | None = None

    @property
    def replays(self) -> int:
        """Calls served by a graph, over all graphs held now."""
        return sum(g.replays for g in self.graphs)

    @property
    def pool_bytes(self) -> int:
        """Memory the held graphs' captures reserved, summed."""
        return sum(g.pool_bytes for g in self.graphs)


@dataclass(frozen=True)
class TrainingInfo:
    """State of a :class:`~libreyolo_cudagraph.GraphedTraining` at one moment.

    Attributes:
        name: the helper's name (for logs).
        enabled: whether capture is allowed at all.
        latched: why the helper went eager for the rest of the run, or None.
        graphs: captured forward+backward pairs, one per input signature.
        fallbacks: reason -> number of calls that ran eager for it.
        eager_calls: calls that ran eager for any reason (shape not repeated yet included).
        invalidations: times every graph was dropped.
        last_invalidation: the reason of the latest one.
    """

    name: str
    enabled: bool
    latched: str | None
    graphs: tuple[GraphInfo, ...]
    fallbacks: Mapping[str, int] = field(default_factory=dict)
    eager_calls: int = 0
    invalidations: int = 0
    last_invalidation: str | None = None

    @property
    def replays(self) -> int:
        """Forward calls served by a graph, over all graphs held now."""
        return sum(g.replays for g in self.graphs)
