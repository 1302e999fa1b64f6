"""CUDA graphs in the model zoo: one owner per model for every graph it captured, and the rules
between a family's declarations and ``libreyolo_cudagraph``.

Inference captures the family's ``inference_forward`` seam; training captures its
``training_forward`` seam (forward and backward). NMS, losses and post-processing stay eager.
A family whose task is not declared ``inference_capture`` refuses ``cuda_graph`` at predict time
(``NotImplementedError`` naming it). Every change of what a graph captured (device, dtype,
weights, a head branch) goes through ``ModelGraphs.invalidate``. The fused inference copy
(``ModelHandle.fused_net``) has a runner of its own, released with the copy.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import torch

from .errors import ConfigError

if TYPE_CHECKING:
    from libreyolo_cudagraph import GraphedTraining, GraphRunner, SegmentedGraphRunner

    from .compiled import CompiledForward
    from .handle import ModelHandle

log = logging.getLogger(__name__)

GraphRequest = bool | Literal["auto"]
MAX_GRAPHS = 8  # distinct (batch, imgsz, dtype) signatures kept per model; LRU beyond


def graph_mode(request: GraphRequest) -> str:
    if request is True:
        return "on"
    if request == "auto":
        return "auto"
    raise ConfigError(f"cuda_graph={request!r} must be False, True or 'auto'")


def check_graph_support(model: ModelHandle, what: str) -> None:
    """Raise unless ``model`` may capture inference graphs here (family verified, on CUDA)."""
    spec = model.spec
    if not spec.task(model.task).inference_capture:
        raise NotImplementedError(
            f"{spec.display_name} ({spec.name}, {model.task}) is not verified for CUDA graph inference capture: "
            f"its row in docs/parity-matrix.md is not green, so {what} is refused rather than risking wrong "
            "results. Use cuda_graph=False (the default).")
    if model.device.type != "cuda":
        raise ConfigError(f"{what} needs the model on a CUDA GPU, but it is on {model.device}. "
                          "Move it first (model.to(0) or predict(..., device=0)) or leave cuda_graph=False.")


class ModelGraphs:
    """Every graph one model captured: the inference runners (of the network and of its fused
    copy) and the training capture."""

    def __init__(self, model: ModelHandle) -> None:
        self._model = model
        self.inference: GraphRunner | SegmentedGraphRunner | None = None
        self.fused_inference: GraphRunner | SegmentedGraphRunner | None = None
        self.training: GraphedTraining | None = None
        self.compiled: dict[tuple[int, str], CompiledForward] = {}  # (id(net), mode) -> compiled forward
        self._runner_compile: dict[bool, str | None] = {False: None, True: None}  # what each runner replays
        self.last_invalidation: str | None = None

    def inference_runner(self, mode: str, net: torch.nn.Module | None = None, compile: str | None = None
                         ) -> GraphRunner | SegmentedGraphRunner:
        """The runner of ``net``'s inference seam (``model.net`` by default, or its fused copy),
        created on first use, switched to ``mode``; ``compile``: a ``torch.compile`` mode whose
        kernels it captures (``compiled``), None for the eager ones."""
        from libreyolo_cudagraph import GraphRunner

        model = self._model
        fused = net is not None and net is not model.net
        runner = self.fused_inference if fused else self.inference
        if runner is not None and ((fused and runner.watch is not net) or self._runner_compile[fused] != compile):
            # a copy built since, or other kernels asked for: start over
            runner.release()
            runner = None
        if runner is None:
            target = net if fused and net is not None else model.net
            name = f"{model.spec.name}-{model.size}{'-fused' if fused else ''}{f'-compiled-{compile}' if compile else ''}"
            stages = model.family.inference_stages(target) if compile is None else None
            if stages:
                runner = segmented_runner(stages, mode, target, name)
            else:
                runner = GraphRunner(self.inference_forward(target, compile), mode=mode,  # type: ignore[arg-type]
                                     max_graphs=MAX_GRAPHS, copy_outputs=True, watch=target, name=name)
            self._runner_compile[fused] = compile
            if fused:
                self.fused_inference = runner
            else:
                self.inference = runner
        elif runner.mode != mode:
            runner.mode = mode  # type: ignore[assignment]
        return runner

    def inference_forward(self, net: torch.nn.Module, compile: str | None = None) -> Callable[[torch.Tensor], Any]:
        """The eager inference seam over ``net``, or (``compile``) its compiled form, kept per network
        and mode so later calls reuse what was compiled."""
        model = self._model
        forward = model.inference_forward if net is model.net else (lambda x: model.inference_forward(x, net=net))
        if compile is None:
            return forward
        key = (id(net), compile)
        held = self.compiled.get(key)
        if held is None:
            from .compiled import CompiledForward

            log.info("compile=%r: the first call of each input shape compiles the network (tens of seconds)",
                     compile)
            held = self.compiled[key] = CompiledForward(forward, compile, f"{model.spec.name}-{model.size}")
        return held

    def release_fused(self) -> None:
        """Free the fused copy's graphs and pool (the copy is gone or being replaced), and what was
        compiled of it."""
        if self.fused_inference is not None:
            self.fused_inference.release()
        self.fused_inference = None
        net = self._model.net
        self.compiled = {k: v for k, v in self.compiled.items() if k[0] == id(net)}

    def attach_training(self, graphed: GraphedTraining | None) -> None:
        self.training = graphed

    def release_training(self) -> None:
        """Free the training graphs (at the end of a run). Under NCCL a live graph that recorded
        collectives makes ``destroy_process_group`` hang, so this comes before any teardown."""
        if self.training is not None:
            self.training.release()
        self.training = None

    def invalidate(self, reason: str) -> None:
        """Drop captured graphs and compiled forwards; the next call recaptures per its mode (and
        recompiles: a compiled forward was specialised to the weights' device and dtype). The
        reason is logged and kept (``describe()``'s ``last_invalidation``)."""
        held = sum(r is not None for r in (self.inference, self.fused_inference, self.training))
        # info when something held graphs; with nothing captured yet (a first move to the GPU) it is noise
        log.log(logging.INFO if held else logging.DEBUG, "%s-%s: CUDA graphs invalidated (%d runner(s) held): %s",
                self._model.spec.name, self._model.size, held, reason)
        self.last_invalidation = reason
        for runner in (self.inference, self.fused_inference):
            if runner is not None:
                runner.invalidate(reason)
        if self.training is not None:
            self.training.invalidate(reason)
        if self.compiled:
            self.compiled.clear()
            self.release_inference()

    def release_inference(self) -> None:
        """Free the inference graphs (of the network and of its fused copy); training's stay."""
        if self.inference is not None:
            self.inference.release()
        self.inference = None
        self.release_fused()

    def release(self) -> None:
        """Free every graph and its memory pool, and every compiled forward; the runners are forgotten."""
        self.release_inference()
        self.compiled.clear()
        if self.training is not None:
            self.training.release()
        self.training = None

    def describe(self) -> dict[str, Any]:
        """``graph_info()``: support, mode, per graph its signature and replay count, the latest
        invalidation's reason, and the numerics certificate (``certificate.describe_numerics``:
        the checkpoint's class and whether this environment matches the certified one)."""
        from .certificate import describe_numerics

        model = self._model
        verified = model.spec.task(model.task).inference_capture
        info: dict[str, Any] = {"supported": verified and model.device.type == "cuda", "family_verified": verified,
                                "device": str(model.device), "mode": "off", "graphs": [], "fallbacks": {},
                                "last_invalidation": self.last_invalidation,
                                "numerics": describe_numerics(model.checkpoint, family=model.spec.name, size=model.size,
                                                              task=model.task, device=model.device)}
        for fused, runner in ((False, self.inference), (True, self.fused_inference)):
            if runner is None:
                continue
            runner_info = runner.info()
            info["mode"] = runner_info.mode
            info["graphs"] += [{"signature": g.signature, "replays": g.replays, "capture_ms": g.capture_ms,
                                "pool_bytes": g.pool_bytes, "fused": fused} for g in runner_info.graphs]
            info["fallbacks"].update(runner_info.fallbacks)
        return info


def segmented_runner(stages: list[tuple[Callable[..., Any], bool, str]], mode: str, net: torch.nn.Module,
                     name: str) -> SegmentedGraphRunner:
    """A multi-seam runner over a family's ``inference_stages`` (graphable stages replayed, the
    others eager); it answers the same calls as a ``GraphRunner``. Its first stage receives the
    images as predict hands them over (the families that declare stages take float images)."""
    from libreyolo_cudagraph import Segment, SegmentedGraphRunner

    segments = [Segment(fn, graphed, stage) for fn, graphed, stage in stages]
    return SegmentedGraphRunner(segments, mode=mode, max_graphs=MAX_GRAPHS, copy_outputs=True, watch=net, name=name)


def forward_for_predict(model: ModelHandle, request: GraphRequest, net: torch.nn.Module | None = None,
                        compile: str | None = None) -> Callable[[torch.Tensor], Any]:
    """The forward ``predict`` calls over ``net`` (``model.net`` by default, or the fused copy):
    eager (or compiled, ``compile``: a ``torch.compile`` mode) for ``cuda_graph=False``, else that
    network's runner, which replays exactly what that forward computes."""
    target = model.net if net is None else net
    if request is False:
        return model.graphs.inference_forward(target, compile)
    mode = graph_mode(request)
    check_graph_support(model, f"predict(cuda_graph={request!r})")
    return model.graphs.inference_runner(mode, target, compile)


def capture_ahead(model: ModelHandle, *, imgsz: int, batch: int, dtype: torch.dtype | None,
                  fuse: bool | None = None) -> dict[str, Any]:
    """Capture the inference graph for ``batch x 3 x imgsz x imgsz`` ahead of the first request,
    of the network predict runs with the same ``fuse`` (the fused copy by default where the
    family fuses), for the input predict hands it (``Task.prepare_batch``); ``imgsz`` comes resolved
    (``ModelHandle.resolve_imgsz``)."""
    check_graph_support(model, "capture_graph()")
    fusing = model.wants_fuse(fuse)
    if fusing and dtype is not None and dtype != model.dtype:
        model.fused_net()  # folded before any cast, as predict does
    if dtype is not None and dtype != model.dtype:
        if dtype == torch.float16:
            model.half()
        elif dtype == torch.float32:
            model.float()
        else:
            raise ConfigError(f"capture_graph(dtype={dtype}) must be torch.float16 or torch.float32")
    model.net.eval()
    runner = model.graphs.inference_runner("on", model.inference_net(fusing))
    # The input exactly as predict hands it over (dtype, layout: a graph is keyed by both): the
    # task's own preprocessing of blank images (detectors: a uint8 letterbox, scaled in the call).
    blank = [torch.zeros(imgsz, imgsz, 3, dtype=torch.uint8) for _ in range(batch)]
    x, _ = model.task_spec.prepare_batch(blank, imgsz, model.dtype, model.device)
    with torch.inference_mode():
        runner.capture(x)
    return model.graphs.describe()
