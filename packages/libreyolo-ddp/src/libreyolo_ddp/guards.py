"""Pre-launch checks that turn cryptic worker crashes into advice, before any expensive work.

Both failures they catch otherwise surface late and far from their cause: a missing
``__main__`` guard makes every worker re-run the user's script (and try to spawn
again), and an unpicklable callback fails inside ``Process.start`` with a message
about ``<locals>`` that does not say which argument was at fault.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import sys
from collections.abc import Mapping

from libreyolo_ddp.env import SPAWNED_BY_VAR
from libreyolo_ddp.errors import PicklingGuardError, ReentryError

_GUARD_FIX = """\
Each worker process re-imports your script, so an unguarded call runs again in every worker.
Put the training call under the guard:

    if __name__ == "__main__":
        model = ...  # build or load the model here
        model.train(data="data.yaml", device="0,1")"""


def is_direct_spawned_child() -> bool:
    """True in a process that :func:`~libreyolo_ddp.spawn` started itself.

    ``spawn`` writes its own pid into the workers' environment before they start, so
    the variable is already there while a worker re-imports the user's script (before
    ``multiprocessing.parent_process()`` is set). Comparing it with our parent's pid
    keeps grandchildren (DataLoader workers, a subprocess running another script) from
    being mistaken for workers.
    """
    marker = os.environ.get(SPAWNED_BY_VAR)
    if not marker:
        return False
    parent = multiprocessing.parent_process()
    return marker == str(os.getppid()) or (parent is not None and marker == str(parent.pid))


def ensure_not_spawned_child(entry: str = "spawn_ddp_train()") -> None:
    """Refuse to launch workers from inside a worker.

    Args:
        entry: the public name of the launching function, as the user would recognise
            it in the message (the trainer passes its own name).

    Raises:
        ReentryError: this process was started by ``spawn``; the message names the
            missing ``if __name__ == "__main__":`` guard and shows the fix.
    """
    if is_direct_spawned_child():
        raise ReentryError(
            f"{entry} was called from inside a spawned subprocess. This usually means your script calls "
            f"model.train(device=...) at the top level without a 'if __name__ == \"__main__\":' guard.\n"
            f"{_GUARD_FIX}"
        )


def _interactive_main_problem(name: str, obj: object) -> str | None:
    """Objects defined in a notebook / ``python -c`` pickle by reference to a module workers cannot import."""
    module = getattr(obj, "__module__", None) or getattr(type(obj), "__module__", None)
    main = sys.modules.get("__main__")
    if module == "__main__" and main is not None and not getattr(main, "__file__", None):
        return (
            f"argument {name!r} ({obj!r}) is defined in an interactive session (a notebook or python -c), "
            f"which spawned workers cannot import. Move it into a .py module and import it, or run a script "
            f"under torchrun instead."
        )
    return None


def check_picklable(named: Mapping[str, object]) -> None:
    """Check that everything sent to the workers can be pickled, naming what cannot.

    Args:
        named: argument name -> the object that will be sent (e.g. ``{"fn": train,
            "callbacks": cbs}``); the name appears in the error.

    Raises:
        PicklingGuardError: the first argument that cannot be pickled, with the reason,
            what works instead, and the built-in loggers as the alternative to custom
            callbacks.
    """
    for name, obj in named.items():
        problem = _interactive_main_problem(name, obj)
        if problem:
            raise PicklingGuardError(problem)
        try:
            pickle.dumps(obj)
        except Exception as err:  # noqa: BLE001 - any failure means "cannot be sent"; we re-raise it named
            raise PicklingGuardError(
                f"argument {name!r} cannot be sent to the worker processes because it cannot be pickled "
                f"({type(err).__name__}: {err}). Each GPU trains in its own process and receives its "
                f"arguments pickled. Module-level classes and functions work (they are pickled by name); "
                f"closures, lambdas, functions defined inside other functions, and objects holding them or "
                f"open files, locks or sockets do not. Define it at module level, or drop the custom callback "
                f"and use the built-in loggers (results.csv, the CSV logger), which run on rank 0."
            ) from err
