"""Capture primitives on CPU: the lock, thread-local substitution, state preservation."""

from __future__ import annotations

import inspect
import threading
import time

import pytest
import torch
from torch import nn

import libreyolo_cudagraph.capture as capture_mod
from libreyolo_cudagraph import (
    AutocastCacheError,
    NestedCaptureError,
    capture_lock,
    check_autocast_cache,
    graphed_callables,
    preserved_state,
    thread_local_graphs,
)

ORIGINAL = torch.cuda.CUDAGraph


def test_capture_lock_refuses_nesting_on_the_same_thread():
    with capture_lock:
        assert capture_lock.held_by_current_thread()
        with pytest.raises(NestedCaptureError, match="cannot nest"):
            with capture_lock:
                pass
        assert capture_lock.held_by_current_thread()  # the refused attempt did not release it
    assert not capture_lock.locked()


def test_capture_lock_makes_another_thread_wait_its_turn():
    events: list[str] = []
    inside = threading.Event()

    def other() -> None:
        inside.wait()
        with capture_lock:
            events.append("other acquired")

    thread = threading.Thread(target=other)
    thread.start()
    with capture_lock:
        inside.set()
        time.sleep(0.2)
        assert events == []  # the other thread is still waiting
        events.append("main releasing")
    thread.join(timeout=5)
    assert events == ["main releasing", "other acquired"]
    assert not capture_lock.locked()


def test_thread_local_graphs_substitutes_a_subclass_and_restores_it():
    with thread_local_graphs():
        assert torch.cuda.CUDAGraph is not ORIGINAL
        assert issubclass(torch.cuda.CUDAGraph, ORIGINAL)
        assert torch.cuda.graphs.CUDAGraph is torch.cuda.CUDAGraph
        assert capture_lock.held_by_current_thread()
    assert torch.cuda.CUDAGraph is ORIGINAL and torch.cuda.graphs.CUDAGraph is ORIGINAL
    assert not capture_lock.locked()


def test_thread_local_graphs_restores_after_an_exception():
    with pytest.raises(ValueError, match="capture blew up"):
        with thread_local_graphs():
            raise ValueError("capture blew up")
    assert torch.cuda.CUDAGraph is ORIGINAL and torch.cuda.graphs.CUDAGraph is ORIGINAL
    assert not capture_lock.locked()


def test_two_threads_using_thread_local_graphs_leave_no_substitution_behind():
    seen: list[tuple[str, type, type]] = []
    active = []
    overlap = []
    start = threading.Barrier(2)

    def worker(tag: str) -> None:
        start.wait()
        with thread_local_graphs():
            active.append(tag)
            overlap.append(len(active) > 1)
            seen.append((tag, torch.cuda.CUDAGraph, torch.cuda.graphs.CUDAGraph))
            time.sleep(0.05)
            active.remove(tag)

    threads = [threading.Thread(target=worker, args=(t,)) for t in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=5)
    assert sorted(tag for tag, *_ in seen) == ["a", "b"]
    assert all(cls is not ORIGINAL and issubclass(cls, ORIGINAL) for _, cls, _ in seen)
    assert overlap == [False, False]
    assert torch.cuda.CUDAGraph is ORIGINAL and torch.cuda.graphs.CUDAGraph is ORIGINAL


def _capture_begin_211(self, pool=None, capture_error_mode="global"):  # the torch 2.11 signature
    raise AssertionError("only the signature is used")


@pytest.mark.parametrize("method", [ORIGINAL.capture_begin, _capture_begin_211])
@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((), {}),
        (("pool",), {}),
        (("pool", "global"), {}),
        ((), {"pool": "pool", "capture_error_mode": "relaxed"}),
    ],
)
def test_forced_capture_mode_is_thread_local_however_it_was_passed(method, args, kwargs):
    new_args, new_kwargs = capture_mod._force_thread_local(method, args, kwargs)
    bound = inspect.signature(method).bind(None, *new_args, **new_kwargs)
    assert bound.arguments["capture_error_mode"] == "thread_local"
    if args or kwargs:
        assert bound.arguments["pool"] == "pool"


def test_graphed_callables_passes_the_mode_natively_where_torch_takes_it(monkeypatch):
    calls = []

    def native(callables, sample_args, num_warmup_iters=3, capture_error_mode="global"):
        calls.append((capture_error_mode, capture_lock.held_by_current_thread(), torch.cuda.CUDAGraph))
        return "graphed"

    monkeypatch.setattr(torch.cuda, "make_graphed_callables", native)
    assert graphed_callables("fn", ("x",), num_warmup_iters=2) == "graphed"
    assert calls == [("thread_local", True, ORIGINAL)]


def test_graphed_callables_substitutes_the_graph_class_on_older_torch(monkeypatch):
    calls = []

    def legacy(callables, sample_args, num_warmup_iters=3):  # torch < 2.14: no capture mode
        calls.append((capture_lock.held_by_current_thread(), torch.cuda.CUDAGraph))
        return "graphed"

    monkeypatch.setattr(torch.cuda, "make_graphed_callables", legacy)
    assert graphed_callables("fn", ("x",)) == "graphed"
    ((held, cls),) = calls
    assert held and cls is capture_mod._ThreadLocalCUDAGraph
    assert torch.cuda.CUDAGraph is ORIGINAL


def test_preserved_state_restores_batchnorm_buffers_in_place_and_rng():
    torch.manual_seed(0)
    bn = nn.BatchNorm2d(3).train()
    before = {k: v.clone() for k, v in bn.state_dict().items()}
    pointers = {k: v.data_ptr() for k, v in bn.named_buffers()}
    expected_next = torch.rand(4)  # what the RNG gives now...
    torch.manual_seed(0)
    with preserved_state(bn):
        bn(torch.randn(4, 3, 5, 5) * 3 + 1)
        assert bn.num_batches_tracked.item() == 1
        torch.rand(100)
    assert torch.equal(torch.rand(4), expected_next)  # ...and after the block, as if nothing ran
    for key, value in bn.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert {k: v.data_ptr() for k, v in bn.named_buffers()} == pointers


def test_preserved_state_restores_even_when_the_block_raises():
    bn = nn.BatchNorm1d(2).train()
    with pytest.raises(RuntimeError, match="warmup failed"):
        with preserved_state(bn, None):
            bn(torch.randn(8, 2) + 5)
            raise RuntimeError("warmup failed")
    assert torch.equal(bn.running_mean, torch.zeros(2)) and bn.num_batches_tracked.item() == 0


def test_autocast_cache_check_names_the_fix(cuda_autocast_tls):
    cuda_autocast_tls(True, torch.float16, cache=False)
    check_autocast_cache()
    cuda_autocast_tls(True, torch.float16, cache=True)
    with pytest.raises(AutocastCacheError, match=r"cache_enabled=False"):
        check_autocast_cache()
