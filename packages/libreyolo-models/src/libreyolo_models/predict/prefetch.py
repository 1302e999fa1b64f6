"""A bounded background thread that runs ahead of the consumer: decoding overlaps the GPU.

Predict pulls batches of decoded frames from here while the thread decodes the next ones, at
most ``depth`` batches ahead (so memory stays bounded however long the source). Every wait is
bounded: the consumer polls in ``POLL_S`` steps and notices a thread that died; the thread
stops within one poll of the consumer going away (a generator closed early, an exception), and
closes the source (a video file, a camera) itself. An error in the thread reaches the consumer
unchanged, at the point in the sequence where it happened.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
POLL_S = 0.1
JOIN_TIMEOUT_S = 5.0


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


_DONE = object()


class Prefetcher(Generic[T]):
    """Iterate ``items`` on a thread, ``depth`` items ahead; iterate this object to consume.

    Args:
        items: the producer's iterable (iterated, and closed if a generator, on the thread).
        depth: how many produced items may wait for the consumer.
        name: thread name (shows in stack dumps).
    """

    def __init__(self, items: Iterable[T], *, depth: int = 2, name: str = "libreyolo-prefetch") -> None:
        if depth < 1:
            raise ValueError(f"depth={depth} must be at least 1")
        self._items = items
        self._queue: queue.Queue[object] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = False

    def _put(self, item: object) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        iterator = iter(self._items)
        try:
            for item in iterator:
                if not self._put(item):
                    return
            self._put(_DONE)
        except BaseException as err:  # noqa: BLE001 - handed to the consumer, raised there
            self._put(_Failure(err))
        finally:
            close: Callable[[], object] | None = getattr(iterator, "close", None)
            if close is not None:
                close()

    @property
    def started(self) -> bool:
        """Whether the thread was started (it then owns, and closes, the producer)."""
        return self._thread.ident is not None

    def start(self) -> None:
        """Start producing now, before the consumer first asks (idempotent)."""
        if not self.started:
            self._thread.start()

    def __iter__(self) -> Iterator[T]:
        if self._started:
            raise RuntimeError("a Prefetcher is iterated once")
        self._started = True
        self.start()
        try:
            while True:
                try:
                    item = self._queue.get(timeout=POLL_S)
                except queue.Empty:
                    if not self._thread.is_alive() and self._queue.empty():
                        raise RuntimeError("the prefetch thread ended without a result or an error") from None
                    continue
                if item is _DONE:
                    return
                if isinstance(item, _Failure):
                    raise item.error
                yield item  # type: ignore[misc]
        finally:
            self.close()

    def close(self) -> None:
        """Stop the thread (it closes its source) and wait for it, bounded by ``JOIN_TIMEOUT_S``."""
        self._stop.set()
        if self._thread.is_alive():
            started = time.perf_counter()
            self._thread.join(JOIN_TIMEOUT_S)
            if self._thread.is_alive():
                log.warning("prefetch thread still busy %.1f s after stop (a blocked read); left to finish",
                            time.perf_counter() - started)
