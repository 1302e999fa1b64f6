"""GraphedTraining: capture a network's forward and backward once a batch shape repeats.

Only the network is graphed. Loss, GradScaler, optimizer step, clipping, EMA and LR schedule
stay eager and outside, exactly as in the eager loop, so the two paths cannot drift.
"""

from __future__ import annotations

import gc
import logging
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from .capture import CaptureResources, autocast_cache_problem, capture_in_progress
from .eligibility import device_reason, expanded_input_reason, name_of, one_line, require_tensors
from .errors import GraphConfigError, StaleGraphError
from .fallbacks import FallbackLog
from .infer_graph import MIB
from .info import GraphInfo, TrainingInfo
from .signature import Signature, call_signature, describe_signature
from .storage import StorageWatch
from .train_graph import CapturedTrainStep, Inflight, capture_train_step, replay

log = logging.getLogger(__name__)

_REMEMBERED = 256

# Codes ranks agree on (the minimum over ranks wins): every rank replays or captures this step,
# some rank runs this step eagerly, or some rank latched (then every rank latches).
GRAPH, EAGER, LATCHED = 2, 1, 0
Agree = Callable[[int], int]
_BUSY = (
    "a graphed forward still awaits its backward (two forwards before one backward); "
    "ran eager so its buffers stay intact"
)


def _weak_callback(method: Any) -> Any:
    ref = weakref.WeakMethod(method)

    def call(err: BaseException) -> None:
        target = ref()
        if target is not None:
            target(err)

    return call


@dataclass(eq=False)
class _Entry:
    step: CapturedTrainStep
    signature: str
    replays: int = 0


class GraphedTraining(nn.Module):
    """Training forward whose backward replays a captured graph, once a batch shape repeats.

    ``out = graphed(*inputs)`` behaves like ``module(*inputs)`` in a training loop. A new input
    signature (shapes, dtypes, layout, device, autocast state) runs eager until it has been
    seen ``repeat_threshold`` times; on that call the forward and backward are captured and
    replayed from then on. Other shapes (the last partial batch, multi-scale) keep running
    eager, unchanged. Eval mode, ``no_grad`` and ``inference_mode`` calls always run eager.

    Safety: a capture or replay failure latches the helper to eager for the rest of the run
    with one log line; :meth:`invalidate` re-arms it. Parameters moved or replaced, or the set
    of trainable parameters changed (freezing), drops every graph before any replay. Warmup
    restores buffers and RNG, so BatchNorm statistics are not double-updated. Gradients handed
    back are owned tensors, so accumulating micro-batches without ``zero_grad`` matches eager.
    Autocast inside must use ``cache_enabled=False`` (else the call runs eager, with the reason
    logged). The backward is captured with autocast off, matching ``loss.backward()`` called
    outside the autocast block.

    It is an ``nn.Module`` holding ``module`` (so ``.train()``, ``.eval()``, ``.to()`` and DDP
    wrapping work); save ``graphed.module.state_dict()`` to keep checkpoint keys unprefixed.

    Distributed training (one process per GPU): pass ``agree``, a function every rank calls with
    the same sequence of training calls, that returns the minimum of its argument over the ranks
    (``libreyolo_ddp.agree_min`` does it on a CPU group, without a GPU sync). Each training call
    then takes its decision together: every rank replays or captures, or every rank runs eagerly,
    and a capture that fails on any rank latches every rank. Collectives recorded in the graph
    (SyncBatchNorm's) then always pair up. Gradients are not synchronised here: all-reduce them
    after backward (``libreyolo_ddp.average_gradients``) on the graphed and the eager steps alike.

    Args:
        module: the network to train (tensors in, tensors out).
        repeat_threshold: sightings of a signature before it is captured (>= 1).
        warmup_iters: eager forward+backward runs on the capture stream before capture (>= 1).
        enabled: False makes every call eager (an off switch that keeps the call site).
        max_graphs: signatures captured at most; later ones run eager (>= 1).
        name: name used in logs and ``info()``.
        agree: under multi-process training, the minimum-over-ranks function (see above).
    """

    def __init__(
        self,
        module: nn.Module,
        *,
        repeat_threshold: int = 3,
        warmup_iters: int = 3,
        enabled: bool = True,
        max_graphs: int = 4,
        name: str | None = None,
        agree: Agree | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(module, nn.Module):
            raise GraphConfigError(
                f"GraphedTraining(module=...): got {type(module).__name__}, need an nn.Module"
            )
        for arg, value in (
            ("repeat_threshold", repeat_threshold),
            ("warmup_iters", warmup_iters),
            ("max_graphs", max_graphs),
        ):
            if value < 1:
                raise GraphConfigError(f"GraphedTraining({arg}={value}): must be at least 1")
        self.module = module
        self.repeat_threshold = repeat_threshold
        self.warmup_iters = warmup_iters
        self.enabled = enabled
        self.max_graphs = max_graphs
        self.name = name or name_of(module)
        self._agree = agree
        self._graphs: OrderedDict[Signature, _Entry] = OrderedDict()
        self._seen: OrderedDict[Signature, int] = OrderedDict()
        self._latched: str | None = None
        self._fallbacks = FallbackLog(log, self.name)
        self._storage = StorageWatch(module)
        self._trainable = self._storage.trainable()
        # A weak method: a strong one would make a cycle, and the cyclic collector could then
        # free the graphs at an arbitrary moment (illegal while another stream is capturing).
        self._inflight = Inflight(on_failure=_weak_callback(self._backward_failed))
        self._invalidations = 0
        self._last_invalidation: str | None = None
        self._resources = CaptureResources()

    def extra_repr(self) -> str:
        return f"repeat_threshold={self.repeat_threshold}, graphs={len(self._graphs)}, latched={self._latched is not None}"

    def forward(self, *inputs: Tensor) -> Any:
        """Run the module: replayed when its signature is captured, else eager."""
        require_tensors(inputs, self.name)
        if not self.enabled:
            return self._eager(inputs, None)
        if not self.module.training or not torch.is_grad_enabled() or torch.is_inference_mode_enabled():
            return self._eager(inputs, None)  # evaluation: never graphed, never agreed on
        key, entry, reason = self._decide(inputs)
        if self._agree is not None:
            reason = self._agreed(reason)
        if reason is not None:
            level = logging.WARNING if reason == self._latched else logging.INFO
            return self._eager(inputs, reason or None, level)
        if entry is None:
            entry = self._try_capture(key, inputs)
            if entry is None:
                return self._eager(inputs, self._latched, logging.WARNING)
        return self._replay(entry, inputs)

    def _decide(self, inputs: Sequence[Tensor]) -> tuple[Signature, _Entry | None, str | None]:
        """This rank's own choice: (signature, captured entry or None, reason to run eager or None).
        An empty reason means eager without a logged reason (a shape not yet repeated)."""
        if self._latched is not None:
            return (), None, self._latched
        reason = self._device_reason(inputs) or self._context_reason(inputs)
        if reason is not None:
            return (), None, reason
        self._check_storage()
        key = call_signature(inputs, True)
        entry = self._graphs.get(key)
        if entry is None:
            if not self._repeated_enough(key):
                return key, None, ""
            if len(self._graphs) >= self.max_graphs:
                return key, None, f"graph cache full (max_graphs={self.max_graphs}); new shapes run eager"
        if self._inflight.is_busy():
            return key, None, _BUSY
        return key, entry, None

    def _agreed(self, reason: str | None) -> str | None:
        """Take this call's decision together with the other ranks (see the class docstring)."""
        assert self._agree is not None
        mine = LATCHED if reason is not None and reason == self._latched else (EAGER if reason is not None else GRAPH)
        together = self._agree(mine)
        if together == LATCHED and self._latched is None:
            self._latch("another rank's graph capture or replay failed")
        if together == LATCHED:
            return self._latched
        if together == EAGER and reason is None:
            return "another rank runs this step eagerly (ranks take graph decisions together)"
        return reason

    def invalidate(self, reason: str) -> None:
        """Drop every graph, clear a latch and the shape counts: the captured region changed."""
        count = len(self._graphs)
        self._graphs.clear()
        self._seen.clear()
        self._latched = None
        self._invalidations += 1
        self._last_invalidation = reason
        log.info("%s: dropped %d graph(s), re-armed: %s", self.name, count, reason)

    def release(self) -> None:
        """Free every graph and the memory pool (counts are kept; capture resumes per policy)."""
        self._graphs.clear()
        self._resources.drop_pools()
        gc.collect()
        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()

    def info(self) -> TrainingInfo:
        """A frozen snapshot: graphs and their replays, latch, fallbacks."""
        return TrainingInfo(
            name=self.name,
            enabled=self.enabled,
            latched=self._latched,
            graphs=tuple(
                GraphInfo(e.signature, e.replays, e.step.capture_ms, e.step.pool_bytes)
                for e in self._graphs.values()
            ),
            fallbacks=self._fallbacks.snapshot(),
            eager_calls=self._fallbacks.eager_calls,
            invalidations=self._invalidations,
            last_invalidation=self._last_invalidation,
        )

    # -- seams: tests override these to exercise the policy without a GPU ------------------

    def _device_reason(self, inputs: Sequence[Tensor]) -> str | None:
        return device_reason(inputs)

    def _capture(self, inputs: Sequence[Tensor]) -> CapturedTrainStep:
        stream, pool = self._resources.for_device(inputs[0].device)
        return capture_train_step(
            self.module, inputs, pool=pool, stream=stream, warmup_iters=self.warmup_iters
        )

    # -- policy ----------------------------------------------------------------------------

    def _context_reason(self, inputs: Sequence[Tensor]) -> str | None:
        if capture_in_progress():
            return "called inside another graph capture: runs eager so the outer graph records it"
        return autocast_cache_problem() or expanded_input_reason(inputs)

    def _check_storage(self) -> None:
        change = self._storage.changed()
        trainable = self._storage.trainable()
        if change is not None:
            change = f"parameter/buffer storage changed: {change}"
        elif trainable != self._trainable:
            change = f"trainable parameters changed ({sum(self._trainable)} -> {sum(trainable)} require grad)"
        self._trainable = trainable
        if change is not None and self._graphs:
            self._graphs.clear()
            self._invalidations += 1
            self._last_invalidation = change
            log.info("%s: dropped every graph: %s", self.name, change)

    def _repeated_enough(self, key: Signature) -> bool:
        count = self._seen.pop(key, 0) + 1
        self._seen[key] = count
        while len(self._seen) > _REMEMBERED:
            self._seen.popitem(last=False)
        return count >= self.repeat_threshold

    def _try_capture(self, key: Signature, inputs: Sequence[Tensor]) -> _Entry | None:
        try:
            step = self._capture(inputs)
        except Exception as err:
            self._latch(f"capture failed for {describe_signature(key)}: {one_line(err)}")
            if self._agree is not None:
                self._agree(LATCHED)  # the others learn it in the same collective
            return None
        if self._agree is not None and self._agree(GRAPH) != GRAPH:
            self._latch(f"another rank's capture of {describe_signature(key)} failed")
            return None
        entry = _Entry(step, describe_signature(key))
        self._graphs[key] = entry
        log.info(
            "%s: training graph captured: %s in %.0f ms, pool %.1f MiB",
            self.name,
            entry.signature,
            step.capture_ms,
            step.pool_bytes / MIB,
        )
        return entry

    def _replay(self, entry: _Entry, inputs: Sequence[Tensor]) -> Any:
        try:
            out = replay(entry.step, self._inflight, inputs)
        except StaleGraphError:
            raise
        except Exception as err:
            self._latch(f"replay failed for {entry.signature}: {one_line(err)}")
            return self._eager(inputs, self._latched, logging.WARNING)
        entry.replays += 1
        return out

    def _latch(self, reason: str) -> None:
        # Latched for the rest of the run: a failure mid-training usually repeats, and
        # alternating graph and eager steps would make the run hard to reason about.
        self._latched = reason + "; eager for the rest of the run (invalidate() re-arms)"
        self._graphs.clear()

    def _backward_failed(self, err: BaseException) -> None:
        # The error itself reaches the caller through backward(); the next forward logs the latch.
        self._latch(f"backward replay failed: {one_line(err)}")

    def _eager(self, inputs: Sequence[Tensor], reason: str | None, level: int = logging.INFO) -> Any:
        self._fallbacks.record(reason, level)
        return self.module(*inputs)
