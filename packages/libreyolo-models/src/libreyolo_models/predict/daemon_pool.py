"""A thread pool whose threads never hold the process back: daemon threads, abandoned at exit.

``concurrent.futures.ThreadPoolExecutor`` joins its threads when the interpreter exits (since
Python 3.9, whatever ``shutdown(wait=False)`` said). A decode stuck for good (a FIFO, a file on a
hung network drive) is given up on after ``sources.DECODE_TIMEOUT_S`` and predict returns, but
its thread stays blocked in the read, and that join then kept the process from ever exiting.
These threads are daemons: a read that never returns is abandoned when the process ends.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

_Work = tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None


class DaemonPool:
    """``submit`` work to ``threads`` daemon threads; ``shutdown`` cancels what has not started
    and lets each thread end after its current item (never waiting for it)."""

    def __init__(self, threads: int, name: str) -> None:
        self._queue: queue.SimpleQueue[_Work] = queue.SimpleQueue()
        self._name = name
        self._threads: list[threading.Thread] = []
        for _ in range(max(1, threads)):
            self.add_thread()

    def add_thread(self) -> None:
        """One more thread: in place of one stuck in a read that will not return, so the work
        queued behind it does not wait out a timeout item after item."""
        thread = threading.Thread(target=self._serve, name=f"{self._name}_{len(self._threads)}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        future: Future[T] = Future()
        self._queue.put((future, fn, args))
        return future

    def _serve(self) -> None:
        while True:
            work = self._queue.get()
            if work is None:
                return
            future, fn, args = work
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args)
            except BaseException as err:  # noqa: BLE001 - handed to the waiting caller, as an executor does
                future.set_exception(err)
            else:
                future.set_result(result)

    def shutdown(self) -> None:
        """Cancel the queued work and tell every thread to end after its current item."""
        while True:
            try:
                work = self._queue.get_nowait()
            except queue.Empty:
                break
            if work is not None:
                work[0].cancel()
        for _ in self._threads:
            self._queue.put(None)
