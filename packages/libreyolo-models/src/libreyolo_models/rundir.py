"""Run directories: ``runs/train/exp``, ``exp2``, ``exp3`` ... never overwriting an earlier run,
and never shared by two live training runs (``claim_run_dir``, ``run_lock``)."""

from __future__ import annotations

import re
from pathlib import Path

from .errors import RunFolderBusyError
from .run_lock import RunLock


def next_run_dir(project: str | Path, name: str, *, exist_ok: bool = False, create: bool = True) -> Path:
    """The first free ``project/name``, ``project/name2``, ... (or ``project/name`` if ``exist_ok``).

    Creation uses ``mkdir(exist_ok=False)`` so two processes racing for a number never share one.
    """
    root = Path(project).expanduser()
    base = root / name
    if exist_ok:
        if create:
            base.mkdir(parents=True, exist_ok=True)
        return base
    root.mkdir(parents=True, exist_ok=True)
    pattern = re.compile(rf"^{re.escape(name)}(\d*)$")
    taken = [int(m.group(1) or 1) for p in root.iterdir() if (m := pattern.match(p.name))]
    n = max(taken, default=0) + 1
    while True:
        candidate = root / (name if n == 1 else f"{name}{n}")
        if not create:
            if not candidate.exists():
                return candidate
        else:
            try:
                candidate.mkdir()
                return candidate
            except FileExistsError:
                pass
        n += 1


def claim_run_dir(project: str | Path, name: str, *, exist_ok: bool = False) -> tuple[Path, RunLock]:
    """A run folder (``next_run_dir``'s) and its lock, held by this process until released.

    With ``exist_ok=False`` a folder another live run holds is passed over for the next number;
    with ``exist_ok=True`` (this very folder, asked for by name) it is refused.

    Raises:
        RunFolderBusyError: ``exist_ok=True`` and another live run trains in ``project/name``.
    """
    while True:
        folder = next_run_dir(project, name, exist_ok=exist_ok)
        try:
            return folder, RunLock.acquire(folder)
        except RunFolderBusyError:
            if exist_ok:
                raise
