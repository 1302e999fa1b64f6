"""CPU emulations of the two capture seams, so the runners' real policy code runs without a GPU.

Only the CUDA part is replaced: an emulated "graph" keeps static input and output buffers like
a real one, and its replay recomputes the outputs from whatever the static inputs hold (the
training one also keeps the autograd graph of the latest forward replay, so its backward reads
the latest activations, exactly the hazard a real shared-pool graph has).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from libreyolo_cudagraph import GraphedTraining, GraphRunner, preserved_state
from libreyolo_cudagraph.infer_graph import CapturedForward
from libreyolo_cudagraph.train_graph import CapturedTrainStep
from libreyolo_cudagraph.tree import flatten


def emulate_forward(fn: Any, inputs: Sequence[Tensor], watch: nn.Module | None) -> CapturedForward:
    static_inputs = [x.detach().clone() for x in inputs]
    with preserved_state(watch):
        leaves, spec = flatten(fn(*static_inputs))
    static_leaves = [leaf.detach().clone() for leaf in leaves]

    def replay() -> None:
        fresh, _ = flatten(fn(*static_inputs))
        for buf, value in zip(static_leaves, fresh):
            buf.copy_(value)

    return CapturedForward(static_inputs, static_leaves, spec, replay)


class EmulatedRunner(GraphRunner):
    """A GraphRunner whose captures happen on CPU; ``fail_with`` makes the next captures raise."""

    def __init__(self, fn: Any, *, fail_with: BaseException | None = None, **kwargs: Any) -> None:
        super().__init__(fn, **kwargs)
        self.captures = 0
        self.fail_with = fail_with

    def _device_reason(self, inputs: Sequence[Tensor]) -> str | None:
        return None

    def _capture(self, inputs: Sequence[Tensor]) -> CapturedForward:
        self.captures += 1
        if self.fail_with is not None:
            raise self.fail_with
        return emulate_forward(self.fn, inputs, self.watch)


def emulate_train_step(module: nn.Module, inputs: Sequence[Tensor]) -> CapturedTrainStep:
    params = tuple(p for p in module.parameters() if p.requires_grad)
    static_inputs = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]
    targets = (*(s for s in static_inputs if s.requires_grad), *params)
    with preserved_state(module), torch.enable_grad():
        leaves, spec = flatten(module(*static_inputs))
        diff = [leaf for leaf in leaves if leaf.requires_grad]
        probe = torch.autograd.grad(diff, targets, [torch.zeros_like(d) for d in diff], allow_unused=True)
    differentiable = tuple(leaf.requires_grad for leaf in leaves)
    static_outputs = [leaf.detach().clone() for leaf in leaves]
    static_grad_outputs = [torch.zeros_like(leaf) for leaf in diff]
    static_grads = [torch.zeros_like(g) if g is not None else None for g in probe]
    live: dict[str, list[Tensor]] = {}

    def replay_forward() -> None:
        with torch.enable_grad():
            fresh, _ = flatten(module(*static_inputs))
        live["leaves"] = fresh
        for buf, value in zip(static_outputs, fresh):
            buf.copy_(value.detach())

    def replay_backward() -> None:
        outs = [leaf for leaf in live["leaves"] if leaf.requires_grad]
        grads = torch.autograd.grad(outs, targets, static_grad_outputs, allow_unused=True)
        for buf, grad in zip(static_grads, grads):
            if buf is not None:
                buf.copy_(grad)

    return CapturedTrainStep(
        static_inputs=static_inputs,
        params=params,
        static_outputs=static_outputs,
        differentiable=differentiable,
        static_grad_outputs=static_grad_outputs,
        static_grads=static_grads,
        spec=spec,
        replay_forward=replay_forward,
        replay_backward=replay_backward,
    )


class EmulatedTraining(GraphedTraining):
    """A GraphedTraining whose captures happen on CPU; ``fail_with`` makes captures raise."""

    def __init__(self, module: nn.Module, *, fail_with: BaseException | None = None, **kwargs: Any) -> None:
        super().__init__(module, **kwargs)
        self.captures = 0
        self.fail_with = fail_with
        self.steps: list[CapturedTrainStep] = []

    def _device_reason(self, inputs: Sequence[Tensor]) -> str | None:
        return None

    def _capture(self, inputs: Sequence[Tensor]) -> CapturedTrainStep:
        self.captures += 1
        if self.fail_with is not None:
            raise self.fail_with
        step = emulate_train_step(self.module, inputs)
        self.steps.append(step)
        return step


@pytest.fixture
def emulated_runner() -> type[EmulatedRunner]:
    return EmulatedRunner


@pytest.fixture
def emulated_training() -> type[EmulatedTraining]:
    return EmulatedTraining


@pytest.fixture
def cuda_autocast_tls():
    """Set CUDA autocast thread-local state directly (works without a GPU); restored afterwards."""
    saved = (
        torch.is_autocast_enabled("cuda"),
        torch.get_autocast_dtype("cuda"),
        torch.is_autocast_cache_enabled(),
    )

    def set_state(enabled: bool, dtype: torch.dtype = torch.float16, cache: bool = False) -> None:
        torch.set_autocast_enabled("cuda", enabled)
        torch.set_autocast_dtype("cuda", dtype)
        torch.set_autocast_cache_enabled(cache)

    yield set_state
    torch.set_autocast_enabled("cuda", saved[0])
    torch.set_autocast_dtype("cuda", saved[1])
    torch.set_autocast_cache_enabled(saved[2])


@pytest.fixture
def deterministic_cudnn():
    """cuDNN heuristics in deterministic mode, so eager reproduces itself; restored afterwards."""
    saved = (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    yield
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved
