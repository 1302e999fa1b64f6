"""Exception classes of libreyolo-ddp.

Each subclasses the built-in a caller would already catch for that kind of failure
(bad user input is a ValueError, a failed run is a RuntimeError), so code that does
not know this package still handles them sensibly.
"""

from __future__ import annotations


class DDPError(Exception):
    """Base class of every error this package raises on purpose."""


class DeviceError(DDPError, ValueError):
    """A ``device=`` value that cannot be parsed, or names devices this machine lacks."""


class BatchSplitError(DDPError, ValueError):
    """A global batch that does not split evenly over the ranks."""


class PicklingGuardError(DDPError, ValueError):
    """Something that must travel to a worker process cannot be pickled."""


class ReentryError(DDPError, RuntimeError):
    """A launcher was called again from inside a process it spawned."""


class AutobatchError(DDPError, RuntimeError):
    """``batch=-1`` could not be resolved to a batch size."""


class WorkerError(DDPError, RuntimeError):
    """A spawned worker failed; carries its rank and the worker's own traceback text.

    Attributes:
        rank: global rank of the worker that failed first.
        exitcode: the worker's exit code, or ``None`` when it reported an exception
            before exiting.
        traceback_text: the formatted traceback from inside the worker ("" when the
            worker died without being able to report one, e.g. killed by a signal).
    """

    def __init__(self, message: str, *, rank: int, exitcode: int | None, traceback_text: str) -> None:
        super().__init__(message)
        self.rank = rank
        self.exitcode = exitcode
        self.traceback_text = traceback_text

    def __reduce__(self) -> tuple:
        # Keyword-only fields: the default exception pickling would drop them and fail.
        return _rebuild_worker_error, (str(self), self.rank, self.exitcode, self.traceback_text)


def _rebuild_worker_error(message: str, rank: int, exitcode: int | None, traceback_text: str) -> WorkerError:
    return WorkerError(message, rank=rank, exitcode=exitcode, traceback_text=traceback_text)
