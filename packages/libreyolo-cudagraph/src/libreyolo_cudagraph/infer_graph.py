"""One captured inference graph: static input buffers, the graph, static output buffers.

The order of a capture matters and is kept here in one place:

1. copy the example inputs into static buffers laid out exactly like them (same strides);
2. warm up on the side stream the capture will use (lazy cuDNN/cuBLAS setup, per-stream
   workspaces and autotuning must not end up inside the graph), with buffers and RNG
   snapshotted so the warmup leaves the model as it was;
3. capture on that same stream, thread-local, into the runner's private memory pool.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from .capture import CAPTURE_ERROR_MODE, capture_lock
from .errors import CaptureError
from .hazards import scan_for_silent_ops
from .recovery import recovering
from .state import preserved_state
from .tree import TreeSpec, flatten, unflatten

MIB = 1024 * 1024


@dataclass(eq=False)
class CapturedForward:
    """Static buffers of one captured call and the function that replays it.

    ``replay`` recomputes ``static_leaves`` from whatever ``static_inputs`` hold. On a GPU it is
    ``CUDAGraph.replay``; tests substitute an eager re-run to exercise the runner's policy on CPU.
    """

    static_inputs: list[Tensor]
    static_leaves: list[Tensor]
    spec: TreeSpec
    replay: Callable[[], None]
    device_index: int | None = None
    capture_ms: float = 0.0
    pool_bytes: int = 0
    keepalive: Any = field(default=None, repr=False)

    def run(self, inputs: Sequence[Tensor], copy_outputs: bool) -> Any:
        """Copy ``inputs`` in, replay, and hand back the outputs (cloned unless asked not to)."""
        if self.device_index is not None and torch.cuda.current_device() != self.device_index:
            with torch.cuda.device(self.device_index):
                return self._run(inputs, copy_outputs)
        return self._run(inputs, copy_outputs)

    def _run(self, inputs: Sequence[Tensor], copy_outputs: bool) -> Any:
        for static, x in zip(self.static_inputs, inputs):
            static.copy_(x)
        self.replay()
        leaves = [leaf.clone() for leaf in self.static_leaves] if copy_outputs else self.static_leaves
        return unflatten(self.spec, leaves)


def static_copy(x: Tensor) -> Tensor:
    """A new tensor with ``x``'s shape, strides, dtype and device, holding ``x``'s values."""
    buf = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
    buf.copy_(x)
    return buf


def measure_reserved(device: torch.device) -> int:
    """Bytes the caching allocator holds on ``device`` after returning what it can."""
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    return torch.cuda.memory_reserved(device)


def capture_forward(
    fn: Callable[..., Any],
    inputs: Sequence[Tensor],
    *,
    pool: Any,
    stream: torch.cuda.Stream,
    warmup_iters: int,
    state_module: nn.Module | None,
) -> CapturedForward:
    """Warm up and capture ``fn(*inputs)`` under the ambient grad/autocast context.

    Raises:
        NestedCaptureError: the calling thread is already capturing.
        CaptureError: the captured outputs require grad (an inference graph cannot carry autograd).
        Exception: whatever the warmup or the capture raised; the model is restored regardless.
    """
    device = inputs[0].device
    with capture_lock, torch.cuda.device(device):
        static_inputs = [static_copy(x) for x in inputs]
        ambient = torch.cuda.current_stream()
        started = time.perf_counter()
        with preserved_state(state_module):
            stream.wait_stream(ambient)
            with recovering(ambient, stream, device):
                with torch.cuda.stream(stream):
                    hazard = scan_for_silent_ops(lambda: fn(*static_inputs))
                    if hazard is not None:
                        raise CaptureError(hazard)
                    for _ in range(warmup_iters):
                        fn(*static_inputs)
                reserved_before = measure_reserved(device)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool, stream=stream, capture_error_mode=CAPTURE_ERROR_MODE):
                    outputs = fn(*static_inputs)
        pool_bytes = max(0, torch.cuda.memory_reserved(device) - reserved_before)
        capture_ms = (time.perf_counter() - started) * 1000.0
    leaves, spec = flatten(outputs)
    if any(leaf.requires_grad for leaf in leaves):
        raise CaptureError(
            "captured outputs require grad: an inference graph would hand back tensors whose "
            "autograd history points at capture-time buffers; call under torch.no_grad() or "
            "torch.inference_mode(), or use GraphedTraining for training"
        )
    return CapturedForward(
        static_inputs=static_inputs,
        static_leaves=leaves,
        spec=spec,
        replay=graph.replay,
        device_index=device.index,
        capture_ms=capture_ms,
        pool_bytes=pool_bytes,
        keepalive=graph,
    )
