"""The gated prefetch thread (training's rendering thread) and the GPU pipelines' RenderAhead."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import torch

from libreyolo_models.prefetch import Prefetcher


def _counting(produced: list[int], n: int, closed: threading.Event | None = None) -> Iterator[int]:
    try:
        for i in range(n):
            produced.append(i)
            yield i
    finally:
        if closed is not None:
            closed.set()


def test_a_gated_thread_produces_only_what_the_consumer_allowed() -> None:
    produced: list[int] = []
    fetch = Prefetcher(_counting(produced, 5), depth=1, gated=True)
    it = iter(fetch)
    assert next(it) == 0  # asking allows the first item itself
    time.sleep(0.3)
    assert produced == [0]  # nothing ahead until allowed
    fetch.allow_next()
    fetch.allow_next()  # at most depth (1) ahead: the second call is a no-op
    deadline = time.monotonic() + 2.0
    while len(produced) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    assert produced == [0, 1]
    assert list(it) == [1, 2, 3, 4]  # the rest, each allowed when asked for


def test_closing_a_gated_consumer_stops_the_waiting_thread_and_closes_the_source() -> None:
    produced: list[int] = []
    closed = threading.Event()
    fetch = Prefetcher(_counting(produced, 100, closed), depth=1, gated=True)
    it = iter(fetch)
    assert next(it) == 0
    it.close()  # type: ignore[attr-defined]
    assert closed.wait(2.0) and produced == [0]


def test_a_gated_thread_ends_the_sequence_and_forwards_errors() -> None:
    def failing() -> Iterator[int]:
        yield 1
        raise ValueError("tile 7 of images/a.jpg: broken")

    it = iter(Prefetcher(failing(), depth=1, gated=True))
    assert next(it) == 1
    with pytest.raises(ValueError, match="tile 7"):
        next(it)
    assert list(Prefetcher(iter([]), depth=1, gated=True)) == []


@dataclass
class _Rendered:
    images: torch.Tensor
    labels: torch.Tensor
    name: str


@pytest.mark.cuda
def test_render_ahead_gives_the_batches_a_main_thread_render_gives_on_the_callers_stream() -> None:
    """Rendered on a thread and a side stream, handed over in order, equal to rendering here."""
    from libreyolo_models.data.pipeline import RenderAhead

    device = torch.device("cuda", 0)
    raw = [torch.full((4, 3, 64, 64), float(i)) for i in range(5)]
    threads: list[str] = []

    def render(x: torch.Tensor) -> _Rendered:
        threads.append(threading.current_thread().name)
        moved = x.to(device, non_blocking=True)
        return _Rendered((moved * 2 + 1).sqrt(), moved.mean((1, 2, 3)), "b")

    ahead = RenderAhead(raw, render, device)
    got = []
    for batch in ahead:
        ahead.allow_next()  # as the trainer does before backward
        got.append((batch.images.clone(), batch.labels.clone()))
    assert len(got) == 5 and set(threads) == {"libreyolo-render"}
    for (images, labels), x in zip(got, raw, strict=True):
        expected = render(x)
        assert torch.equal(images, expected.images) and torch.equal(labels, expected.labels)
    ahead.close()
