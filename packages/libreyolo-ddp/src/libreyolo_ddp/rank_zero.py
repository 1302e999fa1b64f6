"""Rank 0 owns side effects: files, run directories, callbacks, loggers, progress bars.

Two ranks writing one checkpoint corrupt it; two ranks choosing a run directory pick
``exp2`` and ``exp3``. So side effects go through these helpers: run only on rank 0,
or computed on rank 0 and broadcast so every rank agrees.
"""

from __future__ import annotations

import functools
import logging
import pickle
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from libreyolo_ddp.collectives import broadcast_object, is_dist_initialized
from libreyolo_ddp.env import dist_env
from libreyolo_ddp.errors import DDPError

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")


def is_rank_zero() -> bool:
    """True on rank 0, and in any process that is not part of a distributed run."""
    return dist_env().rank == 0


def rank_zero_only(fn: Callable[P, T]) -> Callable[P, T | None]:
    """Decorator: run ``fn`` on rank 0 only; other ranks get None without calling it.

    The rank is checked at call time, not at decoration time, so module-level
    functions decorated before the process group exists behave correctly.
    """

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T | None:
        return fn(*args, **kwargs) if is_rank_zero() else None

    return wrapper


def resolve_on_rank_zero(fn: Callable[[], T]) -> T:
    """Compute a value on rank 0 and give the same value to every rank (e.g. the run directory).

    Without a process group ``fn`` simply runs here. If ``fn`` fails on rank 0, rank 0
    re-raises its own error and every other rank raises :class:`DDPError` saying so,
    instead of waiting in the broadcast until the group timeout.

    Args:
        fn: called with no arguments on rank 0 only; its result must be picklable.

    Returns:
        ``fn()``'s result, on every rank.
    """
    if not is_dist_initialized():
        return fn()
    rank = dist_env().rank
    failure: BaseException | None = None
    payload: tuple[str, object] = ("pending", None)
    if rank == 0:
        try:
            value = fn()
            pickle.dumps(value)  # fail here, before the broadcast, not inside it
            payload = ("ok", value)
        except BaseException as err:  # noqa: BLE001 - re-raised below once the others are released
            failure = err
            payload = ("error", f"{type(err).__name__}: {err}")
    kind, value = broadcast_object(payload, src=0)
    if failure is not None:
        raise failure
    if kind == "error":
        name = getattr(fn, "__qualname__", repr(fn))
        raise DDPError(f"rank {rank}: rank 0 failed in {name}() while resolving a shared value: {value}")
    return value


class RankLogFilter(logging.Filter):
    """Drops records below WARNING and prefixes the rest with ``[rank N]``.

    Installed on handlers (not loggers): a logger's own filters do not see records
    propagated from child loggers, a handler's filters see them all.
    """

    def __init__(self, rank: int) -> None:
        super().__init__()
        self.rank = rank

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return False
        if not getattr(record, "_libreyolo_rank_prefixed", False):
            # The record is shared by every handler; mark it so it is prefixed once.
            record.msg = f"[rank {self.rank}] {record.msg}"
            record._libreyolo_rank_prefixed = True
        return True


def configure_rank_logging(rank: int | None = None) -> RankLogFilter | None:
    """On ranks other than 0, keep only warnings and errors, each prefixed with the rank.

    Adds a :class:`RankLogFilter` to every handler of the root logger (and to
    ``logging.lastResort``, which prints when no handler is configured). It adds no
    handlers: configuring output stays the application's job. Call it after the
    application configured logging; calling it twice does not stack filters.

    Args:
        rank: this process's rank; :func:`dist_env` when None.

    Returns:
        The installed filter, or None on rank 0 (which logs unchanged).
    """
    rank = dist_env().rank if rank is None else rank
    if rank == 0:
        return None
    rank_filter = RankLogFilter(rank)
    handlers = list(logging.getLogger().handlers)
    if logging.lastResort is not None:
        handlers.append(logging.lastResort)
    for handler in handlers:
        if not any(isinstance(f, RankLogFilter) for f in handler.filters):
            handler.addFilter(rank_filter)
    return rank_filter
