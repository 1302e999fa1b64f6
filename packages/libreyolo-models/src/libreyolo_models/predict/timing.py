"""Per-phase times of a predict batch without stalling the GPU to take them.

On CUDA each mark is an event recorded on the current stream: reading the times waits only for
work the batch has already waited for (its results reach the host at the end anyway), so timing
adds no host synchronisation between preprocessing, the network and post-processing. On the
CPU a mark is a wall-clock reading.
"""

from __future__ import annotations

import time

import torch


class PhaseClock:
    """``mark(name)`` at the end of each phase; ``ms()`` after the batch's results are on the host."""

    def __init__(self, device: torch.device) -> None:
        self._cuda = device.type == "cuda"
        self._marks: list[tuple[str, object]] = []
        self._start = self._now()

    def _now(self) -> object:
        if self._cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def mark(self, phase: str) -> None:
        """The phase ``phase`` ends now (it began at the previous mark)."""
        self._marks.append((phase, self._now()))

    def ms(self) -> dict[str, float]:
        """Milliseconds per phase, in marking order (a phase marked more than once: its parts summed)."""
        out: dict[str, float] = {}
        previous = self._start
        for phase, stamp in self._marks:
            if self._cuda:
                stamp.synchronize()  # type: ignore[attr-defined]
                took = previous.elapsed_time(stamp)  # type: ignore[attr-defined]
            else:
                took = (stamp - previous) * 1e3  # type: ignore[operator]
            out[phase] = out.get(phase, 0.0) + took  # a phase marked twice (two decoders) sums
            previous = stamp
        return out
