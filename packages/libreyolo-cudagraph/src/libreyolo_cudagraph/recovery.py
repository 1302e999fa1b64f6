"""Undo what a failed capture leaves behind, so that the process goes on eagerly as before.

A capture that fails inside ``torch.cuda.graph`` (a host sync, an op that cannot be captured,
a kernel compiled mid-capture) makes ``cudaStreamEndCapture`` raise, and torch (2.11 and our
lock's 2.15 among them) raises before two pieces of its own cleanup:

- the capture stream stays current (``torch.cuda.graph.__exit__`` restores it after
  ``capture_end``), so every later eager op of the thread would run on it;
- the device's default random generator stays marked as capturing (its capture epilogue runs
  after ``cudaStreamEndCapture``), so every later random op outside a capture raises "Offset
  increment outside graph capture encountered unexpectedly": a run latched to eager dies at its
  next dropout or weight init.

:func:`recovering` puts both right on the way out of a failed capture.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import torch

log = logging.getLogger(__name__)


def restore_stream(ambient: torch.cuda.Stream) -> None:
    """Make ``ambient`` current again if a failed capture left the capture stream current."""
    if torch.cuda.current_stream() != ambient:
        torch.cuda.set_stream(ambient)


def clear_generator_capture_mark(device: torch.device) -> None:
    """End the default generator's stale capture mark with one tiny capture that succeeds.

    A successful capture runs the generator's epilogue, which clears the mark. Draws inside a
    capture are counted apart from the generator's seed and offset, so the random stream goes
    on exactly where it was. Best effort: where the CUDA context itself is broken (a device-side
    assert), this capture fails too, is logged, and the caller's original error stands.
    """
    try:
        with torch.cuda.device(device):
            scratch = torch.empty(1, device=device)
            side = torch.cuda.Stream(device)
            side.wait_stream(torch.cuda.current_stream())
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.stream(side):
                graph.capture_begin(capture_error_mode="thread_local")
                try:
                    scratch.zero_()  # one node: torch warns about an empty graph
                finally:
                    graph.capture_end()
            torch.cuda.current_stream().wait_stream(side)
            del graph
    except Exception as err:  # noqa: BLE001 - the caller is already raising the error that matters
        log.debug("could not clear the random generator's capture mark on %s: %s", device, err)


@contextmanager
def recovering(ambient: torch.cuda.Stream, stream: torch.cuda.Stream, device: torch.device) -> Iterator[None]:
    """Around a warmup and capture on ``stream``: whatever happens, ``ambient`` is current again
    and waits for ``stream``; if the block raised, the generator's capture mark is cleared too."""
    try:
        yield
    except BaseException:
        restore_stream(ambient)
        clear_generator_capture_mark(device)
        raise
    finally:
        restore_stream(ambient)
        ambient.wait_stream(stream)
