"""One captured training step: a forward graph, a backward graph, and the autograd glue.

The forward graph computes the network's outputs into static buffers; the backward graph turns
static output-gradients into static parameter (and input) gradients. An autograd Function
replays them, so loss, GradScaler, optimizer, clipping and EMA stay ordinary eager code.

Two rules keep gradients right:

- Gradients handed back are clones. Returning a view of a static gradient buffer would let
  AccumulateGrad adopt it as ``param.grad`` (it steals a gradient nobody else references);
  the next replay would then overwrite ``param.grad`` in place, so accumulating two
  micro-batches without ``zero_grad`` would give twice the second one.
- A backward may only replay while its forward's activations are intact. The pool is shared,
  so a second graphed forward (or a capture) before the first one's backward would overwrite
  them; :class:`Inflight` lets the helper run such a forward eagerly instead, and refuses
  (``StaleGraphError``) a backward that arrives after its buffers were reused anyway.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from .aliasing import parameters_replaced
from .capture import CAPTURE_ERROR_MODE, capture_lock
from .errors import CaptureError, CudaGraphError, StaleGraphError
from .hazards import scan_for_silent_ops
from .infer_graph import measure_reserved, static_copy
from .recovery import recovering
from .state import preserved_state
from .tree import TreeSpec, flatten, unflatten


@dataclass(eq=False)
class CapturedTrainStep:
    """Static buffers and replay functions of one captured forward+backward.

    ``grad_targets`` are the tensors gradients are computed for: static inputs that require
    grad, then the module's trainable parameters; ``static_grads`` holds one slot per target
    (None where a target was unused). ``replay_forward`` refreshes ``static_outputs`` from
    ``static_inputs``; ``replay_backward`` refreshes ``static_grads`` from ``static_grad_outputs``.
    """

    static_inputs: list[Tensor]
    params: tuple[Tensor, ...]
    static_outputs: list[Tensor]
    differentiable: tuple[bool, ...]
    static_grad_outputs: list[Tensor]
    static_grads: list[Tensor | None]
    spec: TreeSpec
    replay_forward: Callable[[], None]
    replay_backward: Callable[[], None]
    capture_ms: float = 0.0
    pool_bytes: int = 0
    keepalive: Any = field(default=None, repr=False)

    def input_needs_grad(self) -> list[bool]:
        """Per static input, whether it requires grad (and so receives a gradient)."""
        return [s.requires_grad for s in self.static_inputs]


class Inflight:
    """Tracks the latest graphed forward of a helper until its backward has replayed."""

    def __init__(self, on_failure: Callable[[BaseException], None] | None = None) -> None:
        self.ticket = 0
        self._pending: weakref.ref[Any] | None = None
        self.on_failure = on_failure

    def issue(self, ctx: Any) -> int:
        """Record a new graphed forward (its autograd node ``ctx``); returns its ticket."""
        self.ticket += 1
        self._pending = weakref.ref(ctx)
        return self.ticket

    def is_busy(self) -> bool:
        """A graphed forward's backward has not run and its autograd node is still alive."""
        return self._pending is not None and self._pending() is not None

    def check(self, ticket: int) -> None:
        """Refuse a backward whose activations were overwritten by a later graphed forward."""
        if ticket != self.ticket:
            raise StaleGraphError(
                f"backward of graphed forward #{ticket} arrived after graphed forward #{self.ticket} "
                "reused its buffers (a second backward through a retained graph?); call backward "
                "before the next forward, or disable graphs for this loop"
            )

    def done(self, ticket: int) -> None:
        """Mark forward ``ticket``'s backward as run."""
        if ticket == self.ticket:
            self._pending = None


class GraphedStep(torch.autograd.Function):
    """Replays a :class:`CapturedTrainStep`; forward inputs are (step, inflight, *inputs, *params)."""

    @staticmethod
    def forward(
        ctx: Any, step: CapturedTrainStep, inflight: Inflight, *tensors: Tensor
    ) -> tuple[Tensor, ...]:
        for static, x in zip(step.static_inputs, tensors):
            static.copy_(x)
        step.replay_forward()
        ctx.step, ctx.inflight = step, inflight
        ctx.ticket = inflight.issue(ctx)
        outputs = tuple(o.clone() for o in step.static_outputs)
        frozen = [o for o, diff in zip(outputs, step.differentiable) if not diff]
        if frozen:
            ctx.mark_non_differentiable(*frozen)
        return outputs

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, *grads: Tensor) -> tuple[Tensor | None, ...]:
        step: CapturedTrainStep = ctx.step
        ctx.inflight.check(ctx.ticket)
        slots = (g for g, diff in zip(grads, step.differentiable) if diff)
        for static, grad in zip(step.static_grad_outputs, slots):
            static.copy_(grad)
        try:
            step.replay_backward()
        except Exception as err:
            if ctx.inflight.on_failure is not None:
                ctx.inflight.on_failure(err)
            raise CudaGraphError(f"graphed backward replay failed: {err}") from err
        ctx.inflight.done(ctx.ticket)
        owned = iter([g.clone() if g is not None else None for g in step.static_grads])
        input_grads = [next(owned) if needs else None for needs in step.input_needs_grad()]
        return (None, None, *input_grads, *owned)


def _nothing() -> None:
    return None


def replay(step: CapturedTrainStep, inflight: Inflight, inputs: Sequence[Tensor]) -> Any:
    """Run one graphed forward; the result's backward replays the captured backward."""
    outputs = GraphedStep.apply(step, inflight, *inputs, *step.params)
    return unflatten(step.spec, list(outputs))


def _static_leaf(x: Tensor) -> Tensor:
    buf = static_copy(x.detach())
    return buf.requires_grad_(x.requires_grad)


def _grads(
    outputs: Any, targets: tuple[Tensor, ...], grad_outputs: list[Tensor] | None
) -> tuple[Tensor | None, ...]:
    leaves, _ = flatten(outputs)
    diff = [leaf for leaf in leaves if leaf.requires_grad]
    if not diff or not targets:
        return ()
    fill = grad_outputs if grad_outputs is not None else [torch.zeros_like(d) for d in diff]
    # Backward runs with autocast off, as in the usual eager loop (scaler.scale(loss).backward()
    # outside the autocast block): autocast state reaches backward ops through autograd's
    # thread-local state and would recast some of them.
    with torch.autocast("cuda", enabled=False):
        return torch.autograd.grad(diff, targets, grad_outputs=fill, allow_unused=True)


def capture_train_step(
    module: nn.Module,
    inputs: Sequence[Tensor],
    *,
    pool: Any,
    stream: torch.cuda.Stream,
    warmup_iters: int,
) -> CapturedTrainStep:
    """Warm up, then capture ``module(*inputs)`` and its backward, leaving the module unchanged.

    Warmup and capture run on ``stream`` under the capture lock, with buffers and RNG restored
    afterwards, so BatchNorm statistics are updated only by the real (replayed) steps.
    """
    device = inputs[0].device
    named = [(name, p) for name, p in module.named_parameters() if p.requires_grad]
    params = tuple(p for _, p in named)
    # The captured region differentiates fresh aliases of the parameters (same storage, new
    # autograd leaves), not the parameters themselves: autograd caches a leaf's gradient
    # accumulator with the stream it was created on, so after eager steps on the default
    # stream the real parameters' accumulators would make the capturing stream wait on the
    # legacy stream and invalidate the capture (cudaErrorStreamCaptureImplicit). Aliases made
    # here get their accumulators on the capture stream; replays still read the live weights.
    aliases = {name: p.detach().requires_grad_() for name, p in named}
    by_identity = {id(p): aliases[name] for name, p in named}

    def call(*xs: Tensor) -> Any:
        with parameters_replaced(module, by_identity):
            return module(*xs)

    with capture_lock, torch.cuda.device(device):
        static_inputs = [_static_leaf(x) for x in inputs]
        targets = (*(s for s in static_inputs if s.requires_grad), *aliases.values())
        ambient = torch.cuda.current_stream()
        started = time.perf_counter()
        with preserved_state(module):
            stream.wait_stream(ambient)
            with recovering(ambient, stream, device):
                with torch.cuda.stream(stream):
                    with torch.no_grad():
                        hazard = scan_for_silent_ops(lambda: call(*static_inputs))
                    if hazard is not None:
                        raise CaptureError(hazard)
                    for _ in range(warmup_iters):
                        _grads(call(*static_inputs), targets, None)
                reserved_before = measure_reserved(device)
                fwd = torch.cuda.CUDAGraph()
                with torch.cuda.graph(fwd, pool=pool, stream=stream, capture_error_mode=CAPTURE_ERROR_MODE):
                    outputs = call(*static_inputs)
                leaves, spec = flatten(outputs)
                differentiable = tuple(leaf.requires_grad for leaf in leaves)
                grad_outputs = [torch.zeros_like(leaf) for leaf in leaves if leaf.requires_grad]
                bwd: torch.cuda.CUDAGraph | None = None
                grads: tuple[Tensor | None, ...] = ()
                if grad_outputs and targets:  # else nothing flows back; an empty capture warns
                    bwd = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(
                        bwd, pool=pool, stream=stream, capture_error_mode=CAPTURE_ERROR_MODE
                    ):
                        grads = _grads(outputs, targets, grad_outputs)
        pool_bytes = max(0, torch.cuda.memory_reserved(device) - reserved_before)
        capture_ms = (time.perf_counter() - started) * 1000.0
    return CapturedTrainStep(
        static_inputs=static_inputs,
        params=params,
        static_outputs=[leaf.detach() for leaf in leaves],
        differentiable=differentiable,
        static_grad_outputs=grad_outputs,
        static_grads=list(grads) if grads else [None] * len(targets),
        spec=spec,
        replay_forward=fwd.replay,
        replay_backward=bwd.replay if bwd is not None else _nothing,
        capture_ms=capture_ms,
        pool_bytes=pool_bytes,
        keepalive=(fwd, bwd, aliases),
    )
