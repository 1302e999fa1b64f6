"""Atomic file writes that leave nothing behind: checkpoints, ``results.csv``, caches, downloads.

A write goes to a temporary file beside the target, is flushed and fsynced, given the mode an
ordinary ``open()`` would give it (``0o666`` less the user's umask: ``tempfile.mkstemp`` makes
files ``0o600``, which hides a shared run from the rest of a team), then renamed over the target.
Readers see the old file or the new one, never half of one.

A process killed mid-write (SIGKILL, power loss) cannot delete its temporary file, so each temp
name carries its owner, ``.<name>.<host>-<pid>.<random>.tmp``, and the next write to the same
folder removes temp files whose owner on this host has ended (or, from another host, that are a
day old). ``remove_stale_temps`` does the same for a whole folder, e.g. when a run starts.
"""

from __future__ import annotations

import logging
import os
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)

_FOREIGN_TEMP_AGE_S = 24 * 3600.0  # another host's temp file: assume its writer died after a day


def umask_mode(base: int = 0o666) -> int:
    """``base`` less this process's umask: the mode ``open()`` would create a file with."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return base & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # no /proc: read it by setting it (and put it straight back)
    os.umask(mask)
    return base & ~mask


def host_tag() -> str:
    """This host's name as it appears in temp-file names (no dots or dashes)."""
    return socket.gethostname().replace("-", "_").replace(".", "_") or "host"


def owner_tag() -> str:
    """``<host>-<pid>``: who owns a temporary file."""
    return f"{host_tag()}-{os.getpid()}"


def pid_alive(pid: int) -> bool:
    """Whether a process with ``pid`` exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # it exists, owned by another user
    return True


def parse_owner(text: str) -> tuple[str, int] | None:
    """``(host, pid)`` from a ``<host>-<pid>`` tag, or None."""
    host, _, pid = text.rpartition("-")
    return (host, int(pid)) if host and pid.isdigit() else None


def is_abandoned(path: Path, owner: tuple[str, int] | None) -> bool:
    """A temp file whose writer is gone: its process ended on this host, or it is a day old."""
    if owner is not None and owner[0] == host_tag():
        return not pid_alive(owner[1])
    try:
        return time.time() - path.stat().st_mtime > _FOREIGN_TEMP_AGE_S
    except OSError:
        return False


def remove_stale_temps(folder: Path, name: str | None = None, *, owned_folder: bool = False) -> list[Path]:
    """Remove abandoned temp files of atomic writes in ``folder`` (only those of ``name`` if given).

    Args:
        folder: where to look.
        name: only temp files of this target (``.<name>.*.tmp``).
        owned_folder: the caller owns ``folder`` (rank 0 starting a run in its run directory), so
            no one else can be writing there: every ``.<name>.*.tmp`` goes, whatever its owner
            (older versions wrote temp names without one).

    Returns:
        The files removed (each also logged).
    """
    removed: list[Path] = []
    prefix = f".{name}." if name is not None else "."
    try:
        entries = [e for e in os.listdir(folder) if e.startswith(prefix) and e.endswith(".tmp")]
    except OSError:
        return removed
    for entry in entries:
        parts = entry[:-len(".tmp")].rsplit(".", 2)  # [".<name>", "<host>-<pid>", "<random>"]
        owner = parse_owner(parts[1]) if len(parts) == 3 else None
        if owner is None and not owned_folder:
            continue  # not one of ours
        path = folder / entry
        if owned_folder or is_abandoned(path, owner):
            try:
                path.unlink()
            except OSError:
                continue
            log.info("removed %s, left by an interrupted write", path)
            removed.append(path)
    return removed


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], object]) -> Path:
    """Write ``path`` atomically with ``write(file)``; the mode follows the umask.

    Abandoned temp files of earlier writes to ``path`` are removed first.

    Returns:
        ``path`` (``~`` expanded).
    """
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path.parent, path.name)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{owner_tag()}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, umask_mode())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path


def fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (where the file system allows opening a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
