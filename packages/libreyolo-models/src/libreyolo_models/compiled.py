"""``predict(compile=...)``: the inference network through ``torch.compile``, the option Ultralytics
users know, and what our CUDA graph replays when both are asked for.

Why: a CUDA graph removes launch overhead but replays the eager kernels as they are. Inductor
generates kernels that fold each convolution's bias and activation and the concatenations
between them, which is what ``torch.compile(mode="reduce-overhead")`` is faster by on a fused
YOLOv9-t (docs/benchmarks.md). With ``compile=True, cuda_graph=True`` our graph captures those
generated kernels: the replay equals the compiled call bit for bit, as it equals the eager call
without compile. The compiled numbers themselves are compile's (rounding differs from the eager
network's; not bit for bit), so compile is opt-in and eager stays the default.

Each input shape compiles once (``dynamic=False``: the best kernels for predict's fixed sizes;
tens of seconds per shape on a GPU); the compiled forwards are kept per network and mode and go
with the network (``ModelGraphs``). When compiling fails (no C++ compiler for the CPU backend, an
unsupported op) the call says so once and runs eagerly, as Ultralytics' ``compile`` does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from .errors import ConfigError

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

CompileMode = Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]
CompileRequest = bool | CompileMode
MODES: tuple[str, ...] = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
GRAPHING_MODES = frozenset({"reduce-overhead", "max-autotune"})
"""Modes in which Inductor records CUDA graphs of its own: they cannot sit inside ours."""


def compile_mode(request: CompileRequest, cuda_graph: object = False) -> str | None:
    """The ``torch.compile`` mode ``request`` names (True: ``"default"``), None for False.

    Raises:
        ConfigError: an unknown mode, or a mode that records CUDA graphs of its own together with
            ``cuda_graph`` (one graph cannot be captured inside another).
    """
    if request is False:
        return None
    mode = "default" if request is True else request
    if mode not in MODES:
        raise ConfigError(f"compile={request!r} must be True, False or one of {', '.join(MODES)}")
    if mode in GRAPHING_MODES and cuda_graph is not False:
        raise ConfigError(f"compile={mode!r} records CUDA graphs of its own, which cannot be captured inside "
                          f"cuda_graph={cuda_graph!r}; use compile=True (Inductor's kernels, replayed by our graph) "
                          f"or leave cuda_graph=False")
    if cuda_graph is not False:
        import torch

        if not hasattr(torch.compiler, "set_stance"):  # torch 2.6 on (libreyolo_cudagraph.hazards)
            raise ConfigError(
                f"compile={request!r} with cuda_graph={cuda_graph!r} needs torch 2.6 or later (this is torch "
                f"{torch.__version__}): before a capture the call runs once under a dispatch mode that looks for "
                "operators that replay wrong, and older Dynamo stops compiling a function that meets one; "
                "upgrade torch, or pass compile= or cuda_graph= alone")
    return mode


def compile_failure(err: BaseException) -> str:
    """One line naming what failed: the backend's own error where Dynamo wrapped it (the wrapper's
    first line is only "backend='inductor' raised:"), else the error itself."""
    inner = getattr(err, "inner_exception", None) or err.__cause__ or err
    lines = [line.strip() for line in str(inner).splitlines() if line.strip()]
    where = f" (in {type(err).__name__})" if inner is not err else ""
    return f"{type(inner).__name__}: {(lines or [''])[0][:300]}{where}"


class CompiledForward:
    """``forward`` through ``torch.compile(mode=...)``, falling back to ``forward`` itself (with one
    warning) if compiling fails."""

    def __init__(self, forward: Callable[[torch.Tensor], Any], mode: str, name: str) -> None:
        import torch  # here, not at import: the settings parse modes without loading torch

        self.forward, self.mode, self.name = forward, mode, name
        self.compiled: Callable[[torch.Tensor], Any] | None = torch.compile(forward, mode=mode, dynamic=False)
        self.failed: str | None = None

    def __call__(self, x: torch.Tensor) -> Any:
        if self.compiled is None:
            return self.forward(x)
        try:
            return self.compiled(x)
        except Exception as err:
            from torch._dynamo.exc import TorchDynamoException  # compile's own failures; others propagate

            if not isinstance(err, TorchDynamoException):
                raise
            self.compiled, self.failed = None, compile_failure(err)
            log.warning("compile=%r: compiling %s failed (%s); predicting without compile", self.mode, self.name,
                        self.failed)
            return self.forward(x)
