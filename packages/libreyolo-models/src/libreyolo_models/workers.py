"""How many DataLoader workers: from the CPU count unless the user says (the choice is logged)."""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def default_workers(requested: int | None, *, batch: int, world_size: int = 1) -> int:
    """``requested`` as given, else the usable cores split over local ranks, capped at 8 and the batch."""
    if requested is not None:
        return requested
    cores = usable_cores()
    workers = max(0, min(8, cores // max(world_size, 1) - 1, batch))
    log.info("workers=%d (from %d CPU cores%s; set workers= to override)", workers, cores,
             f" over {world_size} ranks" if world_size > 1 else "")
    return workers
