"""How many DataLoader workers: from the CPU count unless the user says, and never more than the
cores and the memory can hold (each choice and each cap is logged)."""

from __future__ import annotations

import logging

from libreyolo_ddp import usable_cores

from .data.cache_store import mem_available_bytes

log = logging.getLogger(__name__)

WORKER_MEMORY_BYTES = 512 << 20
"""Memory one DataLoader worker is counted at. A forked worker shares its parent's pages until it
writes them; a training worker's own share grew to about 420 MB in one report (YOLOv9 on a small
dataset: ``workers=1000`` on 2 cores then drew the OOM killer on the parent), so workers are capped
at the available memory over 512 MiB each."""


def worker_cap(world_size: int = 1) -> tuple[int, str]:
    """The most workers one rank may start here, and why: the usable cores split over the local
    ranks (more processes than cores only take turns), and the available memory at
    ``WORKER_MEMORY_BYTES`` each (over the ranks, too)."""
    ranks = max(world_size, 1)
    cores = usable_cores()
    cap, facts = max(1, cores // ranks), [f"{cores} usable CPU cores{f' over {ranks} ranks' if ranks > 1 else ''}"]
    available = mem_available_bytes()
    if available is not None:
        by_memory = int(available // (WORKER_MEMORY_BYTES * ranks))
        facts.append(f"{available / 2**30:.1f} GiB of memory available at ~{WORKER_MEMORY_BYTES / 2**30:.1f} GiB a "
                     "worker")
        cap = min(cap, by_memory)
    return cap, ", ".join(facts)


def default_workers(requested: int | None, *, batch: int, world_size: int = 1) -> int:
    """``requested`` (capped by ``worker_cap``, with a warning), else the usable cores split over
    local ranks less one, capped at 8, the batch and ``worker_cap``."""
    cap, facts = worker_cap(world_size)
    if requested is not None:
        if requested > cap:
            log.warning("workers=%d capped to %d (%s); more would only take turns or exhaust the memory",
                        requested, cap, facts)
            return cap
        return requested
    cores = usable_cores()
    workers = max(0, min(8, cores // max(world_size, 1) - 1, batch, cap))
    log.info("workers=%d (from %s; set workers= to override)", workers, facts)
    return workers
