"""GraphRunner: replay captured CUDA graphs for any callable from tensors to tensors.

The runner decides, per call, between a graph and eager. Its cache is keyed by everything a
graph bakes in (see :mod:`libreyolo_cudagraph.signature`); anything it cannot graph runs eager
with the reason counted in ``info().fallbacks``. It never crashes to avoid eager: a failed
capture latches that signature to eager with one log line.
"""

from __future__ import annotations

import gc
import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from .capture import CaptureResources, autocast_cache_problem, capture_in_progress, check_autocast_cache
from .eligibility import (
    GraphMode,
    check_mode,
    device_reason,
    expanded_input_reason,
    name_of,
    one_line,
    require_tensors,
)
from .errors import CaptureError, GraphConfigError, NestedCaptureError
from .fallbacks import FallbackLog
from .infer_graph import MIB, CapturedForward, capture_forward
from .info import GraphInfo, RunnerInfo
from .signature import Signature, call_signature, describe_signature
from .storage import StorageWatch

log = logging.getLogger(__name__)

_REMEMBERED = 256  # signatures kept for auto-mode counting and for latches (bounded memory)


@dataclass(eq=False)
class _Entry:
    captured: CapturedForward
    signature: str
    replays: int = 0


class GraphRunner:
    """Run ``fn`` through CUDA graphs, one per call signature, falling back to eager safely.

    ``fn`` takes tensors (positional) and returns a tensor or a nested tuple/list/dict of
    tensors; the runner returns the same structure. Inputs are copied into static buffers
    before each replay. Outputs are cloned out of the graph's static buffers unless
    ``copy_outputs=False``; then the caller gets views that the next replay of the same graph
    overwrites (read or copy them first).

    Modes: ``"off"`` always eager; ``"on"`` captures a new signature on first sight; ``"auto"``
    captures when a signature is seen the second time, so one-off or ever-changing shapes never
    pay for a capture. The mode can be changed at any time (``runner.mode = "auto"``).

    The cache holds at most ``max_graphs`` graphs. Capturing one more evicts the least
    recently used (``evict=True``, the default); with ``evict=False`` new signatures run eager
    once the cache is full. Before every replay the storage of ``watch``'s parameters and
    buffers is fingerprinted: if any moved or was replaced (``.to()``, ``.half()``,
    ``load_state_dict(..., assign=True)``), every graph is dropped before it can replay
    against stale addresses, one line is logged, and signatures are recaptured per the mode.

    Calls are serialized by a per-runner lock; graphs of one runner share one memory pool.

    Args:
        fn: the callable to graph.
        mode: see above.
        max_graphs: cache cap (>= 1).
        evict: evict the least recently used graph at the cap (True) or run eager (False).
        copy_outputs: clone outputs out of static buffers (True) or return views (False).
        watch: module whose parameters/buffers are fingerprinted, restored after warmup and
            whose ``training`` flag is part of the key; defaults to ``fn`` if it is a module.
            Pass it when ``fn`` is a function closing over a module.
        warmup_iters: eager runs on the capture stream before capture (>= 1).
        name: name used in logs and ``info()``.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        mode: GraphMode = "on",
        max_graphs: int = 8,
        evict: bool = True,
        copy_outputs: bool = True,
        watch: nn.Module | None = None,
        warmup_iters: int = 2,
        name: str | None = None,
    ) -> None:
        if not callable(fn):
            raise GraphConfigError(f"GraphRunner(fn=...): {type(fn).__name__} is not callable")
        if max_graphs < 1:
            raise GraphConfigError(
                f"GraphRunner(max_graphs={max_graphs}): need at least 1; use mode='off' for none"
            )
        if warmup_iters < 1:
            raise GraphConfigError(
                f"GraphRunner(warmup_iters={warmup_iters}): need at least 1 so lazy CUDA setup stays out of the graph"
            )
        self.fn = fn
        self.watch = watch if watch is not None else (fn if isinstance(fn, nn.Module) else None)
        self.name = name or name_of(fn)
        self.max_graphs = max_graphs
        self.evict = evict
        self.copy_outputs = copy_outputs
        self.warmup_iters = warmup_iters
        self._mode = check_mode(mode, "GraphRunner(mode=...)")
        self._graphs: OrderedDict[Signature, _Entry] = OrderedDict()
        self._seen: OrderedDict[Signature, int] = OrderedDict()
        self._latched: OrderedDict[Signature, str] = OrderedDict()
        self._fallbacks = FallbackLog(log, self.name)
        self._storage = StorageWatch(self.watch) if self.watch is not None else None
        self._evictions = 0
        self._evicted: deque[str] = deque(maxlen=16)
        self._invalidations = 0
        self._last_invalidation: str | None = None
        self._resources = CaptureResources()
        self._lock = threading.RLock()

    @property
    def mode(self) -> GraphMode:
        """``"off"``, ``"on"`` or ``"auto"``; assignable."""
        return self._mode

    @mode.setter
    def mode(self, value: GraphMode) -> None:
        self._mode = check_mode(value, f"{self.name}.mode")

    def __repr__(self) -> str:
        return (
            f"GraphRunner({self.name!r}, mode={self._mode!r}, graphs={len(self._graphs)}/{self.max_graphs})"
        )

    def __call__(self, *inputs: Tensor) -> Any:
        """Run ``fn(*inputs)`` through a graph when policy allows, else eagerly."""
        with self._lock:
            require_tensors(inputs, self.name)
            if self._mode == "off":
                return self._eager(inputs, None)
            reason = self._device_reason(inputs) or self._context_reason(inputs)
            if reason is not None:
                return self._eager(inputs, reason)
            self._check_storage()
            key = call_signature(inputs, self._training_flag())
            entry = self._graphs.get(key)
            if entry is not None:
                return self._replay(key, entry, inputs)
            latched = self._latched.get(key)
            if latched is not None:
                return self._eager(inputs, latched)
            if not self._wants_capture(key):
                return self._eager(inputs, None)
            if not self._make_room():
                return self._eager(inputs, f"graph cache full (max_graphs={self.max_graphs}, evict=False)")
            entry = self._try_capture(key, inputs)
            if entry is None:
                return self._eager(inputs, self._latched[key], logging.WARNING)
            return self._replay(key, entry, inputs)

    def capture(self, *example_inputs: Tensor) -> GraphInfo:
        """Capture the signature of ``example_inputs`` now, under the current grad/autocast context.

        Works in any mode (in ``"off"`` the graph is kept but not replayed until the mode
        changes). A signature latched to eager by an earlier failure is retried.

        Raises:
            NestedCaptureError: called from inside another capture.
            AutocastCacheError: CUDA autocast is on with its cache enabled.
            CaptureError: the inputs cannot be graphed, the cache is full with ``evict=False``,
                or the capture itself failed (the cause is chained).
        """
        with self._lock:
            require_tensors(example_inputs, self.name)
            if capture_in_progress():
                raise NestedCaptureError(
                    f"{self.name}.capture() called from inside another capture; captures cannot nest"
                )
            check_autocast_cache()
            reason = self._device_reason(example_inputs) or self._context_reason(example_inputs)
            if reason is not None:
                raise CaptureError(f"{self.name}: cannot capture: {reason}")
            self._check_storage()
            key = call_signature(example_inputs, self._training_flag())
            entry = self._graphs.get(key)
            if entry is None:
                self._latched.pop(key, None)
                if not self._make_room():
                    raise CaptureError(
                        f"{self.name}: cache full (max_graphs={self.max_graphs}, evict=False); "
                        "raise max_graphs, allow eviction, or release() first"
                    )
                try:
                    captured = self._capture(example_inputs)
                except Exception as err:
                    self._latch(key, f"capture failed for {describe_signature(key)}: {one_line(err)}")
                    raise CaptureError(f"{self.name}: capture failed: {one_line(err)}") from err
                entry = self._register(key, captured)
            return self._graph_info(entry)

    def info(self) -> RunnerInfo:
        """A frozen snapshot of graphs, replays, fallbacks and evictions."""
        with self._lock:
            return RunnerInfo(
                name=self.name,
                mode=self._mode,
                graphs=tuple(self._graph_info(e) for e in self._graphs.values()),
                fallbacks=self._fallbacks.snapshot(),
                eager_calls=self._fallbacks.eager_calls,
                evictions=self._evictions,
                evicted=tuple(self._evicted),
                invalidations=self._invalidations,
                last_invalidation=self._last_invalidation,
            )

    def invalidate(self, reason: str) -> None:
        """Drop every graph, latch and auto-mode count; later calls recapture per the mode."""
        with self._lock:
            self._drop_graphs(reason)
            self._latched.clear()
            self._seen.clear()

    def release(self) -> None:
        """Free every graph and the memory pool, and return cached memory to the driver.

        ``torch.cuda.memory_reserved()`` drops afterwards (unless the caller still holds
        output views from ``copy_outputs=False``). Latches and counts are kept; the next
        capture starts a fresh pool.
        """
        with self._lock:
            count = len(self._graphs)
            self._graphs.clear()
            self._resources.drop_pools()
            gc.collect()
            if torch.cuda.is_initialized():
                torch.cuda.empty_cache()
            log.info("%s: released %d graph(s) and their memory pool", self.name, count)

    # -- seams: tests override these to exercise the policy without a GPU ------------------

    def _device_reason(self, inputs: Sequence[Tensor]) -> str | None:
        return device_reason(inputs)

    def _capture(self, inputs: Sequence[Tensor]) -> CapturedForward:
        stream, pool = self._resources.for_device(inputs[0].device)
        return capture_forward(
            self.fn, inputs, pool=pool, stream=stream, warmup_iters=self.warmup_iters, state_module=self.watch
        )

    # -- policy ----------------------------------------------------------------------------

    def _context_reason(self, inputs: Sequence[Tensor]) -> str | None:
        if capture_in_progress():
            return "called inside another graph capture: runs eager so the outer graph records it"
        problem = autocast_cache_problem() or expanded_input_reason(inputs)
        if problem is not None:
            return problem
        if torch.is_grad_enabled() and not torch.is_inference_mode_enabled():
            if any(x.requires_grad for x in inputs) or self._watch_requires_grad():
                return (
                    "grad mode is on and parameters or inputs require grad; an inference graph "
                    "cannot carry autograd. Call under torch.no_grad()/torch.inference_mode(), "
                    "or use GraphedTraining for training"
                )
        return None

    def _watch_requires_grad(self) -> bool:
        return self._storage is not None and any(self._storage.trainable())

    def _training_flag(self) -> bool | None:
        return self.watch.training if self.watch is not None else None

    def _check_storage(self) -> None:
        change = self._storage.changed() if self._storage is not None else None
        if change is not None and self._graphs:
            self._drop_graphs(f"parameter/buffer storage changed: {change}")

    def _wants_capture(self, key: Signature) -> bool:
        if self._mode == "on":
            return True
        count = self._seen.pop(key, 0) + 1
        self._seen[key] = count
        while len(self._seen) > _REMEMBERED:
            self._seen.popitem(last=False)
        return count >= 2

    def _make_room(self) -> bool:
        while len(self._graphs) >= self.max_graphs:
            if not self.evict:
                return False
            _, old = self._graphs.popitem(last=False)
            self._evictions += 1
            self._evicted.append(old.signature)
            log.info(
                "%s: evicted least recently used graph %s (max_graphs=%d)",
                self.name,
                old.signature,
                self.max_graphs,
            )
        return True

    def _try_capture(self, key: Signature, inputs: Sequence[Tensor]) -> _Entry | None:
        try:
            captured = self._capture(inputs)
        except NestedCaptureError:
            raise
        except Exception as err:
            self._latch(key, f"capture failed for {describe_signature(key)}: {one_line(err)}")
            return None
        return self._register(key, captured)

    def _register(self, key: Signature, captured: CapturedForward) -> _Entry:
        entry = _Entry(captured, describe_signature(key))
        self._graphs[key] = entry
        log.info(
            "%s: graph captured: %s in %.0f ms, pool %.1f MiB",
            self.name,
            entry.signature,
            captured.capture_ms,
            captured.pool_bytes / MIB,
        )
        return entry

    def _replay(self, key: Signature, entry: _Entry, inputs: Sequence[Tensor]) -> Any:
        self._graphs.move_to_end(key)
        try:
            out = entry.captured.run(inputs, self.copy_outputs)
        except Exception as err:
            del self._graphs[key]
            reason = f"replay failed for {entry.signature}: {one_line(err)}"
            self._latch(key, reason)
            return self._eager(inputs, reason, logging.WARNING)
        entry.replays += 1
        return out

    def _eager(self, inputs: Sequence[Tensor], reason: str | None, level: int = logging.INFO) -> Any:
        self._fallbacks.record(reason, level)
        return self.fn(*inputs)

    def _latch(self, key: Signature, reason: str) -> None:
        self._latched[key] = reason
        while len(self._latched) > _REMEMBERED:
            self._latched.popitem(last=False)

    def _drop_graphs(self, reason: str) -> None:
        count = len(self._graphs)
        self._graphs.clear()
        self._invalidations += 1
        self._last_invalidation = reason
        log.info("%s: dropped %d graph(s): %s", self.name, count, reason)

    @staticmethod
    def _graph_info(entry: _Entry) -> GraphInfo:
        return GraphInfo(
            signature=entry.signature,
            replays=entry.replays,
            capture_ms=entry.captured.capture_ms,
            pool_bytes=entry.captured.pool_bytes,
        )
