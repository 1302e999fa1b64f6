"""Training events for user callbacks: frozen dataclasses, delivered on rank 0 only.

A callback is any callable taking one event; dispatch on its type::

    def on_event(event):
        if isinstance(event, EpochEnd):
            print(event.epoch, event.metrics["metrics/mAP50-95"])
    model.train(data="shapes", callbacks=[on_event])

Or register one event's callback on the model, under the event names Ultralytics users know
(``CALLBACK_EVENTS``; the event class itself works too)::

    model.add_callback("on_fit_epoch_end", lambda e: print(e.epoch, e.metrics["fitness"]))
    model.train(data="shapes")

Under multi-GPU training callbacks travel to the worker processes, so they must be picklable:
module-level functions or classes, not lambdas or closures.

``StepEnd`` comes every ``log_every`` batches (reading the step's losses costs a device sync, so
it is only built when a callback is registered). ``PredictionImages`` comes once per epoch, only
when a callback sets the attribute ``wants_prediction_images = True`` (the built-in TensorBoard
and W&B loggers do): it costs one forward pass over a few validation images.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainStart:
    run_dir: Path
    epochs: int
    start_epoch: int
    config: dict[str, object]
    setup_s: dict[str, float] = field(default_factory=dict)  # seconds per setup phase (Trainer.SETUP_PHASES)


@dataclass(frozen=True)
class EpochEnd:
    epoch: int                    # 0-based epoch just finished
    metrics: dict[str, float]     # the results.csv row of this epoch
    is_best: bool
    run_dir: Path


@dataclass(frozen=True)
class StepEnd:
    epoch: int                    # 0-based
    step: int                     # 0-based batch index since the first epoch of the run
    losses: dict[str, float]      # this batch's loss terms, under results.csv names ("train/box_loss")
    lr: dict[str, float]          # learning rate per parameter group ("lr/pg0")


@dataclass(frozen=True)
class PredictionImages:
    epoch: int                    # 0-based epoch just validated
    images: dict[str, Any]        # image name -> RGB uint8 [H, W, 3] with the EMA model's predictions


@dataclass(frozen=True)
class TrainEnd:
    run_dir: Path
    best: Path | None
    last: Path | None
    epochs_run: int
    stopped_early: bool
    final_metrics: dict[str, float] = field(default_factory=dict)
    training_graphs: Any = None
    """``GraphedTraining.info()`` of the run's training capture (graphs, replays, latches), or None
    when it trained eagerly: read it here, the graphs are freed when the run ends."""


@dataclass(frozen=True)
class TrainException:
    run_dir: Path | None
    epoch: int
    error: str                    # "TypeName: message"


TrainEvent = TrainStart | StepEnd | PredictionImages | EpochEnd | TrainEnd | TrainException


CALLBACK_EVENTS: dict[str, type] = {
    "on_train_start": TrainStart,           # the run folder exists, before the first epoch
    "on_train_batch_end": StepEnd,          # every ``log_every`` batches, with the losses
    "on_fit_epoch_end": EpochEnd,           # after an epoch's validation: its results.csv row
    "on_train_epoch_end": EpochEnd,         # the same event (validation is part of our epoch)
    "on_prediction_images": PredictionImages,  # per epoch, the EMA model's drawn predictions
    "on_train_end": TrainEnd,               # best.pt and last.pt written (None with save=False)
    "on_exception": TrainException,         # the run failed (the error follows)
}
"""``model.add_callback(name, fn)``'s event names -> the event each one receives."""


class EventCallback:
    """``fn`` called with the events of one type only (what ``model.add_callback`` registers).
    Picklable when ``fn`` is, so it travels to multi-GPU workers like any callback."""

    def __init__(self, event: str | type, fn: Callable[[Any], object]) -> None:
        from ..config import suggest
        from ..errors import ConfigError

        if isinstance(event, str):
            if event not in CALLBACK_EVENTS:
                raise ConfigError(f"add_callback({event!r}): not a training event{suggest(event, CALLBACK_EVENTS)}; "
                                  f"events: {', '.join(CALLBACK_EVENTS)}")
            event = CALLBACK_EVENTS[event]
        if event not in set(CALLBACK_EVENTS.values()):
            raise ConfigError(f"add_callback({event!r}): not a training event class; use one of "
                              f"{', '.join(sorted({c.__name__ for c in CALLBACK_EVENTS.values()}))} or a name")
        if not callable(fn):
            raise ConfigError(f"add_callback: {fn!r} is not callable; pass a function taking one event")
        self.event, self.fn = event, fn
        self.wants_prediction_images = event is PredictionImages

    def __call__(self, event: object) -> None:
        if isinstance(event, self.event):
            self.fn(event)

    def __repr__(self) -> str:
        return f"EventCallback({self.event.__name__}, {getattr(self.fn, '__qualname__', self.fn)!r})"


class CallbackRunner:
    """Calls each callback with each event; a failing callback is logged, never kills training."""

    def __init__(self, callbacks: Sequence[Callable[[TrainEvent], object]] | None, *, enabled: bool) -> None:
        self.callbacks = list(callbacks or [])
        self.enabled = enabled

    @property
    def active(self) -> bool:
        """Whether any callback will receive events (so building an event is worth its cost)."""
        return self.enabled and bool(self.callbacks)

    def wants(self, flag: str) -> bool:
        """Whether a callback asks for an optional event (``wants_prediction_images``)."""
        return self.enabled and any(getattr(cb, flag, False) for cb in self.callbacks)

    def emit(self, event: TrainEvent) -> None:
        if not self.enabled:
            return
        for callback in self.callbacks:
            try:
                callback(event)
            except Exception as err:  # noqa: BLE001 - a user's callback must not end a training run
                log.warning("callback %r failed on %s: %s: %s", callback, type(event).__name__,
                            type(err).__name__, err)
