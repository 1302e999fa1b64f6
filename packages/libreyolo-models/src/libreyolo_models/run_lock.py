"""One live training run per run folder: a lock file naming its owner, released on exit.

Two runs writing one folder (the same ``name=`` with ``exist_ok=True``, or a resume started
twice) would overwrite each other's ``last.pt``, ``best.pt``, ``results.csv`` and ``args.yaml``,
and a model could end up loading the other run's weights. So a training run holds
``<run folder>/.libreyolo-run.lock`` while it runs:

- the lock is an exclusive ``flock`` on that file, which the kernel drops when its process ends
  however it ends (SIGKILL and the OOM killer included): a lock left by a dead run is never in
  the way. The file says who holds it (``host pid start-time``), for the message a second run
  gets; it is emptied on a clean release, so text found in it by the next owner means the last
  one died without releasing (a "stale lock", logged when taken over);
- without ``flock`` (Windows) the file is created exclusively and holds the owner's PID; a lock
  whose process no longer runs on this host is stale and is taken over;
- a second run asking for a held folder is refused with ``RunFolderBusyError`` (``exist_ok=True``,
  a resume); one numbering a new folder (``exist_ok=False``) moves on to the next number.

Only rank 0 of a multi-GPU run takes the lock (it owns the folder's files).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from types import TracebackType

from .atomic_write import host_tag, pid_alive
from .errors import RunFolderBusyError

log = logging.getLogger(__name__)

LOCK_NAME = ".libreyolo-run.lock"


def _owner_text() -> str:
    return f"{host_tag()} {os.getpid()} {time.strftime('%Y-%m-%d %H:%M:%S')}"


def _describe(owner: str) -> str:
    parts = owner.split()
    if len(parts) >= 3 and parts[1].isdigit():
        return f"process {parts[1]} on {parts[0]}, since {' '.join(parts[2:])}"
    return "another process"


class RunLock:
    """The lock of one run folder, held from ``acquire`` until ``release`` (or process exit)."""

    def __init__(self, path: Path, fd: int, *, flocked: bool) -> None:
        self.path, self._fd, self._flocked = path, fd, flocked

    @classmethod
    def acquire(cls, folder: str | Path, purpose: str = "training") -> RunLock:
        """Take ``folder``'s lock now, or raise.

        Raises:
            RunFolderBusyError: another live run holds it; the message names the process and
                what to do.
        """
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / LOCK_NAME
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX
            return cls._acquire_exclusive(path, purpose)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 4096, 0).decode(errors="replace").strip()
            os.close(fd)
            raise RunFolderBusyError(_busy_message(folder, owner, purpose)) from None
        except OSError as err:  # a file system without locks (some network mounts): run unguarded, say so
            os.close(fd)
            log.warning("run folder %s cannot be locked (%s): nothing stops a second run from writing into it",
                        folder, err.strerror or err)
            return cls(path, -1, flocked=False)
        previous = os.pread(fd, 4096, 0).decode(errors="replace").strip()
        if previous:
            log.info("run folder %s: the lock of %s, which ended without releasing it, is taken over", folder,
                     _describe(previous))
        _write(fd, _owner_text())
        return cls(path, fd, flocked=True)

    @classmethod
    def _acquire_exclusive(cls, path: Path, purpose: str) -> RunLock:  # pragma: no cover - not POSIX
        for _ in range(2):
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                owner = path.read_text(errors="replace").strip() if path.is_file() else ""
                parts = owner.split()
                if len(parts) >= 2 and parts[0] == host_tag() and parts[1].isdigit() and not pid_alive(int(parts[1])):
                    log.info("run folder %s: the stale lock of %s is taken over", path.parent, _describe(owner))
                    path.unlink(missing_ok=True)
                    continue
                raise RunFolderBusyError(_busy_message(path.parent, owner, purpose)) from None
            _write(fd, _owner_text())
            return cls(path, fd, flocked=False)
        raise RunFolderBusyError(_busy_message(path.parent, "", purpose))

    def release(self) -> None:
        """Give the folder up (idempotent): the owner text is cleared, then the lock dropped."""
        if self._fd < 0:
            return
        fd, self._fd = self._fd, -1
        try:
            if self._flocked:
                import fcntl

                os.ftruncate(fd, 0)  # empty: released cleanly, not stale
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
            if not self._flocked:  # pragma: no cover - not POSIX
                self.path.unlink(missing_ok=True)

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


def _write(fd: int, text: str) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, (text + "\n").encode(), 0)


def _busy_message(folder: Path, owner: str, purpose: str) -> str:
    return (f"run folder {folder} is in use by another {purpose} run ({_describe(owner)}); two runs in one folder "
            "would overwrite each other's weights and logs. Wait for it to finish, or give this run another "
            "name= (exist_ok=False numbers a new folder)")
