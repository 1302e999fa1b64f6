"""CUDA graphs in the model zoo: the dispatch rules between a family, its declarations and
``libreyolo_cudagraph``.

Only the network forward (``forward_tensors``) is captured; NMS and post-processing stay eager.
A family whose ``inference_capture_verified`` flag is False refuses ``cuda_graph`` at predict time
(``NotImplementedError`` naming it); a CPU model gets a clear error. Every change of what a graph
captured (device, dtype, weights) drops the graphs before the next call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor

from .errors import ConfigError

if TYPE_CHECKING:
    from .model import LibreYOLO

log = logging.getLogger(__name__)

GraphRequest = bool | Literal["auto"]
MAX_GRAPHS = 8  # distinct (batch, imgsz, dtype) signatures kept per model; LRU beyond


def _mode(request: GraphRequest) -> str:
    if request is True:
        return "on"
    if request == "auto":
        return "auto"
    raise ConfigError(f"cuda_graph={request!r} must be False, True or 'auto'")


def check_graph_support(model: LibreYOLO, what: str) -> None:
    """Raise unless ``model`` may capture inference graphs here (family verified, on CUDA)."""
    spec = model.spec
    if not spec.inference_capture_verified:
        raise NotImplementedError(
            f"{spec.display_name} ({spec.name}) is not verified for CUDA graph inference capture: its row in "
            f"docs/parity-matrix.md is not green, so {what} is refused rather than risking wrong results. "
            "Use cuda_graph=False (the default).")
    if model.device.type != "cuda":
        raise ConfigError(f"{what} needs the model on a CUDA GPU, but it is on {model.device}. "
                          "Move it first (model.to(0) or predict(..., device=0)) or leave cuda_graph=False.")


class ModelGraphs:
    """One inference graph runner per model instance, created on first use."""

    def __init__(self, model: LibreYOLO, mode: str) -> None:
        from libreyolo_cudagraph import GraphRunner

        self.runner = GraphRunner(model.forward_tensors, mode=mode, max_graphs=MAX_GRAPHS, copy_outputs=True,
                                  watch=model.net, name=f"{model.spec.name}-{model.size}")

    @property
    def mode(self) -> str:
        return self.runner.mode

    def set_mode(self, mode: str) -> None:
        self.runner.mode = mode

    def capture(self, *, imgsz: int, batch: int, dtype: torch.dtype | None, model: LibreYOLO) -> dict[str, Any]:
        x = torch.rand(batch, 3, imgsz, imgsz, device=model.device, dtype=dtype or model.dtype)
        with torch.inference_mode():
            self.runner.capture(x)
        return describe_graphs(model)

    def release(self) -> None:
        self.runner.release()

    def invalidate(self, reason: str) -> None:
        self.runner.invalidate(reason)


def graphs_for(model: LibreYOLO, mode: str = "on") -> _BoundGraphs:
    """The model's graph runner (created with ``mode`` if absent), after the support checks."""
    check_graph_support(model, "capture_graph()")
    if model._graphs is None:
        model._graphs = ModelGraphs(model, mode)
    return _BoundGraphs(model)


class _BoundGraphs:
    def __init__(self, model: LibreYOLO) -> None:
        self.model = model

    def capture(self, *, imgsz: int, batch: int, dtype: torch.dtype | None) -> dict[str, Any]:
        from .settings import check_imgsz

        if dtype is not None and dtype != self.model.dtype:
            if dtype == torch.float16:
                self.model.half()
            elif dtype == torch.float32:
                self.model.float()
            else:
                raise ConfigError(f"capture_graph(dtype={dtype}) must be torch.float16 or torch.float32")
        self.model.net.eval()
        return self.model._graphs.capture(imgsz=check_imgsz(imgsz), batch=batch, dtype=None, model=self.model)


def forward_for_predict(model: LibreYOLO, request: GraphRequest) -> Callable[[Tensor], Tensor]:
    """The forward ``predict`` calls: eager for ``cuda_graph=False``, else the graph runner."""
    if request is False:
        return model.forward_tensors
    mode = _mode(request)
    check_graph_support(model, f"predict(cuda_graph={request!r})")
    if model._graphs is None:
        model._graphs = ModelGraphs(model, mode)
    elif model._graphs.mode != mode:
        model._graphs.set_mode(mode)
    return model._graphs.runner


def describe_graphs(model: LibreYOLO) -> dict[str, Any]:
    """``graph_info()``: support, mode, and per graph its signature and replay count."""
    supported = model.spec.inference_capture_verified and model.device.type == "cuda"
    info: dict[str, Any] = {"supported": supported,
                            "family_verified": model.spec.inference_capture_verified,
                            "device": str(model.device), "mode": "off", "graphs": [], "fallbacks": {}}
    if model._graphs is not None:
        runner_info = model._graphs.runner.info()
        info["mode"] = runner_info.mode
        info["graphs"] = [{"signature": g.signature, "replays": g.replays, "capture_ms": g.capture_ms,
                           "pool_bytes": g.pool_bytes} for g in runner_info.graphs]
        info["fallbacks"] = dict(runner_info.fallbacks)
    return info
