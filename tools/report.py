"""Shared output of the benchmark scripts: progress to stderr, the markdown report to stdout and
optionally to a file (so a GPU session can bring it back)."""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def side_by_side_env(parts: int) -> dict[str, str]:
    """This environment for one of ``parts`` child processes running side by side: each gets its
    share of the CPU cores as ``OMP_NUM_THREADS`` (unless already set). With one torch thread per
    core in every child, nine training runs on 16 cores spent their time in thread contention (a
    segment validation took 297 s instead of seconds)."""
    env = os.environ.copy()
    if parts > 1:
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // parts)))
    return env


_STARTED = time.monotonic()


def log(message: str) -> None:
    """``message`` on stderr, after the seconds since the tool started (where a timed-out GPU
    call's time went shows in its log)."""
    print(f"[{time.monotonic() - _STARTED:6.1f} s] {message}", file=sys.stderr, flush=True)


def add_row(lines: list[str], row: str) -> None:
    """Append a table row to a report being built, and show it as progress (a long probe's rows
    appear as they are measured)."""
    lines.append(row)
    log(row)


def emit_report(lines: list[str], out: Path | None) -> None:
    text = "\n".join(lines)
    print(text)
    if out is not None:
        out.write_text(text + "\n")
        log(f"wrote {out}")


def fmt(value: Any, spec: str = ".2f") -> str:
    """A table cell: ``value`` formatted with ``spec``, or "-" when there is none."""
    return "-" if value is None else format(value, spec)


def median_call_ms(fn: Callable[[], Any], calls: int) -> float:
    """Median wall time in ms of ``calls`` calls of ``fn`` (for calls that end synchronised, such as
    a predict returning results on the host)."""
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)
