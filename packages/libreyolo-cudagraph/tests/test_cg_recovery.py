"""What ``recovery.recovering`` does on the way out of a capture, on the CPU (streams and the
generator repair stubbed): the ambient stream is made current and waits for the capture stream
either way; the generator's capture mark is cleared only when the block raised, and the block's
own error is the one that propagates. The repair itself runs on a GPU (``test_cg_gpu_infer.py``'s
latch probes check random ops after a failed capture)."""

from __future__ import annotations

import pytest
import torch

from libreyolo_cudagraph import recovery


class FakeStream:
    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    def wait_stream(self, other: FakeStream) -> None:
        self.log.append(f"{self.name} waits for {other.name}")


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    log: list[str] = []
    monkeypatch.setattr(recovery, "restore_stream", lambda ambient: log.append(f"restore {ambient.name}"))
    monkeypatch.setattr(recovery, "clear_generator_capture_mark", lambda device: log.append(f"clear {device}"))
    return log


def test_a_capture_that_succeeds_restores_the_stream_and_leaves_the_generator_alone(calls: list[str]) -> None:
    ambient, side = FakeStream("ambient", calls), FakeStream("side", calls)
    with recovery.recovering(ambient, side, torch.device("cuda", 0)):  # type: ignore[arg-type]
        calls.append("capture")
    assert calls == ["capture", "restore ambient", "ambient waits for side"]


def test_a_capture_that_fails_clears_the_mark_and_its_own_error_propagates(calls: list[str]) -> None:
    ambient, side = FakeStream("ambient", calls), FakeStream("side", calls)
    with pytest.raises(RuntimeError, match="operation not permitted when stream is capturing"):
        with recovery.recovering(ambient, side, torch.device("cuda", 0)):  # type: ignore[arg-type]
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
    assert calls == ["restore ambient", "clear cuda:0", "restore ambient", "ambient waits for side"]


def test_the_repair_never_masks_the_original_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the context itself is broken, the repair's own capture fails too: logged, not raised."""
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(torch.cuda, "device", broken)
    recovery.clear_generator_capture_mark(torch.device("cuda", 0))  # returns quietly
