"""Capture primitives: the process-wide capture lock and thread-local capture mode.

CUDA allows one capture at a time per process in practice (the caching allocator routes a
capturing stream's allocations to a private pool, and torch documents captures as not
concurrent), so every capture in this package runs under :data:`capture_lock`.

Captures use ``capture_error_mode="thread_local"``: with the default ``"global"`` mode, any
other thread that makes a "potentially unsafe" CUDA call during the capture (a DataLoader
pin-memory thread calling ``cudaHostAlloc`` is the usual culprit) invalidates it. Measured on
the project's H200 with torch 2.11: ``"global"`` fails with ``cudaErrorStreamCaptureInvalidated``,
``"thread_local"`` captures and replays bit-identical to eager.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from types import TracebackType
from typing import Any

import torch

from .errors import AutocastCacheError, NestedCaptureError
from .recovery import recovering

log = logging.getLogger(__name__)

CAPTURE_ERROR_MODE = "thread_local"


class CaptureLock:
    """Process-wide lock held for the whole of a capture (warmup included).

    Another thread asking for it waits its turn. The thread that already holds it gets a
    :class:`NestedCaptureError` instead of a deadlock: a capture started from inside another
    capture (a graphed callable that itself captures) cannot work, and waiting would hang.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner: int | None = None

    def __enter__(self) -> CaptureLock:
        me = threading.get_ident()
        if self._owner == me:
            raise NestedCaptureError(
                "a CUDA graph capture was requested while this thread is already capturing "
                "(capture_lock is held by the current thread); captures cannot nest. Run the "
                "inner callable eagerly inside the outer capture, or capture it separately first."
            )
        self._lock.acquire()
        self._owner = me
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._owner = None
        self._lock.release()

    def locked(self) -> bool:
        """Whether any thread holds the lock right now."""
        return self._lock.locked()

    def held_by_current_thread(self) -> bool:
        """Whether the calling thread is inside a capture (nested work must run eager)."""
        return self._owner == threading.get_ident()


capture_lock = CaptureLock()
"""The one capture lock of this process; every capture in this package takes it."""


class CaptureResources:
    """A runner's side stream and memory pool, one of each per device, created on first use.

    Warmup and capture must share a stream, and a runner's graphs share one pool, so both
    live as long as the runner; ``drop_pools`` lets the next capture start a fresh pool.
    """

    def __init__(self) -> None:
        self._streams: dict[int, torch.cuda.Stream] = {}
        self._pools: dict[int, Any] = {}

    def for_device(self, device: torch.device) -> tuple[torch.cuda.Stream, Any]:
        """(capture stream, pool handle) for ``device``."""
        index = device.index if device.index is not None else torch.cuda.current_device()
        if index not in self._streams:
            self._streams[index] = torch.cuda.Stream(device=device)
        if index not in self._pools:
            self._pools[index] = torch.cuda.graph_pool_handle()
        return self._streams[index], self._pools[index]

    def drop_pools(self) -> None:
        """Forget the pool handles (their memory returns once their graphs are gone)."""
        self._pools.clear()


def capture_in_progress() -> bool:
    """Whether the calling thread is capturing: holding the lock, or its stream is capturing.

    The second test catches captures started outside this package (``torch.cuda.graph``).
    """
    if capture_lock.held_by_current_thread():
        return True
    return torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing()


def autocast_cache_problem() -> str | None:
    """Why the current autocast state cannot be captured, or None when it can.

    With the cache on, autocast keeps the fp16 copy of each weight made during warmup; the
    graph then reads those copies forever, so later weight updates (or a cleared cache) are
    invisible to it. torch's own ``make_graphed_callables`` refuses the same state.
    """
    if torch.is_autocast_enabled("cuda") and torch.is_autocast_cache_enabled():
        return (
            "CUDA autocast is on with its weight-cast cache enabled (torch.autocast's default "
            "cache_enabled=True); a graph would bake the cached casts in. Use "
            "torch.autocast('cuda', dtype=..., cache_enabled=False)"
        )
    return None


def check_autocast_cache() -> None:
    """Raise :class:`AutocastCacheError` when the current autocast state cannot be captured."""
    problem = autocast_cache_problem()
    if problem is not None:
        raise AutocastCacheError(problem)


def _force_thread_local(
    method: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Rebind a ``capture_begin(self, ...)`` call so that its capture mode is thread_local.

    Binding against the installed signature keeps this right whether the caller passed the
    pool and the mode positionally (torch.cuda.graph does) or by keyword, on any torch version.
    """
    bound = inspect.signature(method).bind(None, *args, **kwargs)
    bound.arguments["capture_error_mode"] = CAPTURE_ERROR_MODE
    return bound.args[1:], bound.kwargs


_TORCH_CUDAGRAPH = torch.cuda.graphs.CUDAGraph


class _ThreadLocalCUDAGraph(_TORCH_CUDAGRAPH):
    """A ``torch.cuda.CUDAGraph`` whose captures are always thread-local, whatever is asked."""

    def capture_begin(self, *args: Any, **kwargs: Any) -> None:
        args, kwargs = _force_thread_local(_TORCH_CUDAGRAPH.capture_begin, args, kwargs)
        super().capture_begin(*args, **kwargs)


@contextmanager
def thread_local_graphs() -> Iterator[None]:
    """Make torch's own graph creation thread-local for the duration of the block.

    torch < 2.14's ``make_graphed_callables`` has no capture-mode argument and builds its graphs
    through the module attribute ``torch.cuda.CUDAGraph`` at call time; substituting a subclass
    there is what makes its capture thread-local. The substitution happens under
    :data:`capture_lock` (one capture at a time, so two threads can never interleave their
    save/restore) and is undone in ``finally``, even when the capture raises.

    Raises:
        NestedCaptureError: the calling thread is already inside a capture.
    """
    with capture_lock:
        saved_cuda, saved_graphs = torch.cuda.CUDAGraph, torch.cuda.graphs.CUDAGraph
        torch.cuda.CUDAGraph = _ThreadLocalCUDAGraph  # type: ignore[misc]
        torch.cuda.graphs.CUDAGraph = _ThreadLocalCUDAGraph  # type: ignore[misc]
        try:
            yield
        finally:
            torch.cuda.CUDAGraph = saved_cuda  # type: ignore[misc]
            torch.cuda.graphs.CUDAGraph = saved_graphs  # type: ignore[misc]


def make_graphed_callables_accepts_mode() -> bool:
    """Whether the installed ``torch.cuda.make_graphed_callables`` takes ``capture_error_mode``."""
    return "capture_error_mode" in inspect.signature(torch.cuda.make_graphed_callables).parameters


def graphed_callables(callables: Any, sample_args: Any, **kwargs: Any) -> Any:
    """``torch.cuda.make_graphed_callables`` with a thread-local capture on every torch version.

    Passes ``capture_error_mode="thread_local"`` where the installed torch accepts it, else runs
    the call inside :func:`thread_local_graphs`. Either way the call holds the capture lock.
    Note that torch patches the ``forward`` of any module it is given; wrap a module you do not
    want changed. :class:`~libreyolo_cudagraph.GraphedTraining` does its own capture instead,
    so the gradients it hands back are owned tensors.

    Args:
        callables: a module or function, or a tuple of them (as torch takes them).
        sample_args: sample tensors, as torch takes them.
        **kwargs: passed through (``num_warmup_iters``, ``allow_unused_input``, ``pool``).
    """
    check_autocast_cache()
    if "capture_error_mode" in kwargs:
        raise TypeError("graphed_callables always captures thread_local; drop capture_error_mode")
    ambient = torch.cuda.current_stream() if torch.cuda.is_available() else None
    # Inside the lock: a failed capture is put right before another thread may capture.
    cleanup = recovering(ambient, ambient, ambient.device) if ambient is not None else nullcontext()
    if make_graphed_callables_accepts_mode():
        with capture_lock, cleanup:
            return torch.cuda.make_graphed_callables(
                callables, sample_args, capture_error_mode=CAPTURE_ERROR_MODE, **kwargs
            )
    # torch < 2.14: no capture-mode argument; drop this branch when the floor moves.
    with thread_local_graphs(), cleanup:
        return torch.cuda.make_graphed_callables(callables, sample_args, **kwargs)
