"""Per-rank and per-worker seeds derived from the one seed a user configures.

Every rank seeded alike would draw the same augmentations on different images, which
correlates the ranks' batches; every rank seeded at random would make runs
unrepeatable. So each rank gets its own seed, a fixed function of (seed, rank).
"""

from __future__ import annotations

import logging
import random

import torch

from libreyolo_ddp.env import dist_env

log = logging.getLogger(__name__)

_SEED_SPACE = 2**32  # numpy's legacy seeding accepts [0, 2**32); keep every seed inside it
_RANK_STRIDE = 0x9E3779B1  # odd, so rank -> seed is one-to-one modulo 2**32


def seed_for_rank(seed: int, rank: int) -> int:
    """Seed for ``rank`` derived from the configured ``seed``.

    Rank 0 keeps ``seed`` itself (for 0 <= seed < 2**32), so a single-process run and
    rank 0 of a distributed run draw the same numbers. Other ranks are spread by a
    large odd stride, which makes the seeds of one run pairwise distinct for any
    realistic number of ranks and the same on every run.

    Args:
        seed: the configured seed (any integer; reduced modulo 2**32).
        rank: the global rank, >= 0.

    Returns:
        An integer in [0, 2**32).

    Raises:
        ValueError: ``rank`` is negative or ``seed``/``rank`` is not an integer.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed={seed!r} must be an integer (e.g. seed=0)")
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise ValueError(f"rank={rank!r} must be a non-negative integer (the process's global rank)")
    return (seed + rank * _RANK_STRIDE) % _SEED_SPACE


def seed_everything(seed: int, *, rank: int | None = None) -> int:
    """Seed Python's ``random``, torch (CPU and every CUDA device) and numpy for this rank.

    numpy is seeded only when it is installed; this package does not depend on it.

    Args:
        seed: the configured seed.
        rank: the rank to derive for; this process's rank (:func:`dist_env`) when None.

    Returns:
        The per-rank seed actually used.
    """
    rank = dist_env().rank if rank is None else rank
    rank_seed = seed_for_rank(seed, rank)
    random.seed(rank_seed)
    torch.manual_seed(rank_seed)
    try:
        import numpy as np
    except ImportError:  # optional: seed what exists
        pass
    else:
        np.random.seed(rank_seed)
    log.debug("seeded rank %d with %d (configured seed %d)", rank, rank_seed, seed)
    return rank_seed


def seed_dataloader_worker(worker_id: int) -> None:
    """``worker_init_fn`` that seeds numpy and ``random`` inside a DataLoader worker.

    torch already gives each worker ``base_seed + worker_id`` for its own generator;
    :func:`~libreyolo_ddp.build_dataloader` draws ``base_seed`` from a per-rank
    generator, so this seed differs per rank and per worker. numpy is not seeded by
    torch, and without this every worker of a forked loader would repeat the parent's
    numpy stream.
    """
    info = torch.utils.data.get_worker_info()
    worker_seed = (info.seed if info is not None else torch.initial_seed()) % _SEED_SPACE
    random.seed(worker_seed)
    try:
        import numpy as np
    except ImportError:
        return
    np.random.seed(worker_seed)
