"""Operations known to record into a CUDA graph without any error and then replay wrong.

Most operations that cannot be captured say so (a host sync or a host-to-device copy raises during
capture, and the runners fall back to eager naming it). A few record silently and replay garbage:
nothing at capture time tells them from a good capture, and only a comparison with eager shows
it. Before each capture the runners run the callable once with a dispatch mode that notes every
operation's name; one listed here stops the capture, so the runner runs eagerly and says why
(``info().fallbacks``). Keep such an operation in an eager seam (``SegmentedGraphRunner``).

The list holds measured facts only, with where they were measured; an entry can go when a test
shows the operation replaying bit for bit (``tests/test_cg_gpu_infer.py`` records deform_conv2d).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable, Mapping
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode

log = logging.getLogger(__name__)

SILENT_OPS: Mapping[str, str] = {
    "torchvision::deform_conv2d": (
        "records without an error but its replay returns zeros (measured with torch 2.11 and "
        "torchvision 0.26 on an H200, 2026-12-05)"),
}
"""Operator name (``namespace::name``) -> what goes wrong, and where it was measured."""


class OperatorNames(TorchDispatchMode):
    """Notes the name of every operator dispatched while active (``namespace::name``)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: Mapping[str, Any] | None = None) -> Any:
        self.names.add(func._schema.name)
        return func(*args, **(kwargs or {}))


def silent_op_reason(names: set[str]) -> str | None:
    """Why a callable that ran ``names`` must not be captured, or None."""
    for name in sorted(names):
        if name in SILENT_OPS:
            return (f"{name} {SILENT_OPS[name]}: capture refused; run it in an eager seam "
                    "(SegmentedGraphRunner) and graph the rest")
    return None


def scan_for_silent_ops(call: Callable[[], Any]) -> str | None:
    """Run ``call()`` once, noting its operators; the reason it must not be captured, or None.
    Costs one eager call per capture (captures are rare; replays never scan). A call that fails
    under the dispatch mode is not scanned (logged): the scan is a safeguard, and the capture's
    own warmup runs the call again without it.

    A ``torch.compile``'d call runs eagerly for the scan (``_compiled_calls_eager``): Dynamo does
    not trace under a dispatch mode, and torch 2.11's Dynamo, meeting one, marked the compiled
    frame to run eagerly from then on, so the capture after the scan ran the network's Python and
    compiled whatever it had not met yet inside the capture, which failed."""
    try:
        with _compiled_calls_eager(), OperatorNames() as seen:
            call()
    except Exception as err:  # noqa: BLE001 - any failure of the extra pass leaves the capture to decide
        log.debug("operator scan skipped: %s: %s", type(err).__name__, err)
        return None
    return silent_op_reason(seen.names)


def _compiled_calls_eager() -> contextlib.AbstractContextManager[Any]:
    """Compiled functions run as plain Python inside this block (``torch.compiler.set_stance
    ("force_eager")``, torch 2.6 on; process-wide while it lasts), and Dynamo leaves their cached
    frames as they were. Nothing to do when Dynamo was never imported (nothing is compiled).
    Before torch 2.6 there is no stance to set: a compiled function the scan meets is left to run
    eagerly from then on (Dynamo's own choice under a dispatch mode); results stay right, the
    compile is lost, so capture a compiled call on torch 2.6 or later."""
    if "torch._dynamo" not in sys.modules:
        return contextlib.nullcontext()
    import torch

    set_stance = getattr(torch.compiler, "set_stance", None)
    return set_stance("force_eager") if set_stance is not None else contextlib.nullcontext()
