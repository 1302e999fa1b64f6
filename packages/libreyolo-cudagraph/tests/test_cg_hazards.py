"""The list of operations that capture silently wrong, and the scan that finds them in a callable
(on the CPU: the scan is a dispatch mode; what it refuses on a GPU is in test_cg_gpu_infer.py)."""

from __future__ import annotations

import pytest
import torch

from libreyolo_cudagraph.hazards import SILENT_OPS, OperatorNames, scan_for_silent_ops, silent_op_reason


def test_the_scan_names_deform_conv2d_and_passes_ordinary_networks() -> None:
    deform_conv2d = pytest.importorskip("torchvision.ops").deform_conv2d
    x, offset, weight = torch.rand(1, 2, 8, 8), torch.zeros(1, 18, 8, 8), torch.rand(2, 2, 3, 3)
    reason = scan_for_silent_ops(lambda: deform_conv2d(x, offset, weight, padding=(1, 1)))
    assert reason is not None and reason.startswith("torchvision::deform_conv2d records without an error")
    assert "SegmentedGraphRunner" in reason
    net = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.SiLU()).eval()
    with torch.inference_mode():
        assert scan_for_silent_ops(lambda: net(x)) is None


def test_the_scan_leaves_results_and_names_unchanged() -> None:
    x = torch.rand(3, 4)
    with OperatorNames() as seen:
        y = (x @ x.T).relu()
    assert torch.equal(y, (x @ x.T).relu())
    assert {"aten::mm", "aten::relu"} <= seen.names
    assert silent_op_reason(seen.names) is None
    assert all("::" in name for name in SILENT_OPS) and all(SILENT_OPS.values())


def _helper(x: torch.Tensor) -> torch.Tensor:
    return (x * 2).relu()


@pytest.mark.skipif(not hasattr(torch.compiler, "set_stance"),
                    reason="torch before 2.6: the scan cannot keep a compiled call compiled (no set_stance)")
def test_a_compiled_call_stays_compiled_after_the_scan() -> None:
    """Scanning a ``torch.compile``'d call must not turn it eager for good: on torch 2.11 Dynamo,
    meeting the scan's dispatch mode, marked the compiled frame to run as Python from then on (and
    a capture after the scan then compiled the parts it had not met, inside the capture). The
    compiled call's own Python (``_helper``) must not run again after the scan."""
    import sys

    compiled = torch.compile(lambda t: _helper(t) + 1, backend="eager")
    x = torch.rand(4)
    compiled(x)
    assert scan_for_silent_ops(lambda: compiled(x)) is None
    ran: list[str] = []

    def profile(frame, event, arg) -> None:  # noqa: ANN001
        if event == "call" and frame.f_code is _helper.__code__:
            ran.append(event)

    sys.setprofile(profile)
    try:
        out = compiled(x)
    finally:
        sys.setprofile(None)
    assert torch.equal(out, (x * 2).relu() + 1)
    assert not ran, "the compiled call ran its Python again: the scan knocked it off its compiled frame"
