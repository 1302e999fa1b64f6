"""No orphans: a child process (a spawned rank, a DataLoader worker) exits as soon as its parent
is gone, however the parent ended (SIGKILL, the OOM killer included).

A daemon thread waits on the parent's sentinel (the pipe ``multiprocessing`` keeps to every
child, which reads as closed once the parent has died) and ends the process. torch's own
DataLoader watchdog looks at the parent only between items, so a worker busy in a long read or
blocked on a full queue outlived its parent by minutes (four workers of ~420 MB each, in one
report); the thread does not depend on what the worker is doing. Children forked one after the
other hold each other's pipe ends too, so they go in turn, the last forked first, within moments.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import threading

EXIT_CODE = 3
"""How a child ended by its parent's death exits."""


def exit_with_parent() -> bool:
    """In a child process: end it when the parent dies. Returns False (nothing done) outside one."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return False

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(EXIT_CODE)

    threading.Thread(target=watch, name="libreyolo-parent-watch", daemon=True).start()
    return True
