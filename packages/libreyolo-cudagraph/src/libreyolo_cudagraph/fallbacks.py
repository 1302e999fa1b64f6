"""Bookkeeping for calls that ran eager: count each reason, log each reason once.

A fallback must never be silent, but one log line per call would flood a training log, so
each distinct reason is logged the first time it occurs and counted every time.
"""

from __future__ import annotations

import logging
from collections import Counter


class FallbackLog:
    """Counts eager calls by reason; logs the first occurrence of each reason."""

    def __init__(self, logger: logging.Logger, name: str) -> None:
        self._log = logger
        self._name = name
        self.counts: Counter[str] = Counter()
        self.eager_calls = 0

    def record(self, reason: str | None, level: int = logging.INFO) -> None:
        """Count one eager call; ``reason`` None means policy (no fallback to report)."""
        self.eager_calls += 1
        if reason is None:
            return
        if reason not in self.counts:
            self._log.log(level, "%s: running eager: %s", self._name, reason)
        self.counts[reason] += 1

    def snapshot(self) -> dict[str, int]:
        """A copy of reason -> count, for an ``info()`` object."""
        return dict(self.counts)
