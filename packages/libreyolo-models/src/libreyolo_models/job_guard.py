"""One model object, one training at a time, and no other job on it while it trains.

``train()`` changes the weights in place at every step, rebuilds the network when the classes
change and swaps in the best weights at the end. A predict, val, export or track on the same
object from another thread meanwhile would read half-updated weights (and used to fail with a
message about a fuse hook); a second ``train()`` would share the optimizer's parameters (a raw
``TypeError``) while the first reported success. So each ``LibreYOLO`` holds a guard: a second
``train()`` and any other job during one are refused with one line (``ModelBusyError``), naming
the thread that trains and the way on: wait for ``train()`` to return, or use another model
object (``LibreYOLO("<run>/weights/last.pt")`` predicts from the last saved epoch meanwhile).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from .errors import ModelBusyError


class JobGuard:
    """Which thread trains the model, if any (a non-blocking lock: never waits, refuses)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._trainer: str | None = None

    @contextlib.contextmanager
    def training(self) -> Iterator[None]:
        """Hold the model for one ``train()``; a second one (any thread) is refused."""
        if not self._lock.acquire(blocking=False):
            raise ModelBusyError(f"this model is already training (train() in thread {self._trainer!r}); one model "
                                 "object runs one train() at a time: wait for it to return, or train another object "
                                 "(LibreYOLO(...) of the same weights)")
        self._trainer = threading.current_thread().name
        try:
            yield
        finally:
            self._trainer = None
            self._lock.release()

    def refuse_while_training(self, action: str) -> None:
        """Refuse ``action`` (``"predict"``, ``"val"``...) while a ``train()`` of this model runs."""
        trainer = self._trainer
        if trainer is not None:
            raise ModelBusyError(f"cannot {action} while this model trains (train() in thread {trainer!r}): its weights "
                                 "change at every step; call it after train() returns, or on another model object, "
                                 "e.g. LibreYOLO('<run folder>/weights/last.pt') for the last saved epoch")

    @property
    def is_training(self) -> bool:
        return self._trainer is not None
