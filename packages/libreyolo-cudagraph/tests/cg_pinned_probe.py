"""GPU probe run in a fresh process by test_cg_gpu_infer.py: captures while a thread pins memory.

A failed capture can leave a CUDA context unusable, so each scenario runs in its own process
and prints one JSON line. Modes:

- ``global``: a plain ``torch.cuda.graph`` capture in torch's default ``"global"`` mode, once
  without the pinning thread (control) and then with it; the thread is expected to break it.
- ``ours``: GraphRunner, graphed_callables and GraphedTraining capture with the thread running.
- ``latch_runner`` / ``latch_training``: a module that syncs with the host cannot be captured;
  the runner (or the training helper) latches to eager and still returns eager's numbers.
- ``latch_callables``: ``graphed_callables`` on that module raises to its caller.
  Every ``latch_*`` mode then checks that random ops still run (``rng_ok``).
"""

from __future__ import annotations

import copy
import json
import sys
import threading
import time

import torch
from torch import nn

from libreyolo_cudagraph import GraphedTraining, GraphRunner, bitwise_equal, graphed_callables

BLOCK_BYTES = 64 * 1024
MAX_BLOCKS = 32768  # 2 GiB of pinned memory at most
PAUSE_S = 0.0002  # about 3-4 thousand allocations a second: many per capture, and the cap lasts


class PinningThread(threading.Thread):
    """Allocates fresh pinned host blocks (each one a cudaHostAlloc) while ``gate`` is set.

    Blocks are kept alive so the host caching allocator never has a free block to hand back:
    every allocation reaches the driver, like a DataLoader pin-memory thread meeting new batches.
    """

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.gate = threading.Event()
        self.stop = threading.Event()
        self.allocs = 0
        self.errors = 0
        self.blocks: list[torch.Tensor] = []

    def run(self) -> None:
        while not self.stop.is_set():
            if not self.gate.wait(timeout=0.01):
                continue
            if len(self.blocks) >= MAX_BLOCKS:
                time.sleep(0.01)
                continue
            try:
                self.blocks.append(torch.empty(BLOCK_BYTES, dtype=torch.uint8, pin_memory=True))
                self.allocs += 1
            except Exception:  # a global-mode capture elsewhere makes this call fail too
                self.errors += 1
            time.sleep(PAUSE_S)

    def open_gate(self) -> int:
        """Start allocating and return once the thread is visibly busy; returns the alloc count."""
        start = self.allocs
        self.gate.set()
        deadline = time.monotonic() + 5.0
        while self.allocs < start + 3 and self.errors == 0 and time.monotonic() < deadline:
            time.sleep(0.0002)
        return start


def conv_bn(cin: int, cout: int, stride: int = 1) -> nn.Module:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.SiLU())


def deep_net() -> nn.Module:
    torch.manual_seed(0)
    layers = [conv_bn(3, 32, 2)] + [conv_bn(32, 32) for _ in range(40)]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10)).cuda()


def global_capture(model: nn.Module, x: torch.Tensor) -> str | None:
    """Capture with torch's default global mode; None on success, else the error."""
    ambient = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(ambient)
    with torch.cuda.stream(side):
        model(x)
    ambient.wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph, stream=side, capture_error_mode="global"):
            out = model(x)
        graph.replay()
        return None if bitwise_equal(out, model(x)) else "replay differs from eager"
    except Exception as err:
        return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    finally:
        if torch.cuda.current_stream() != ambient:  # older torch leaves the capture stream current
            torch.cuda.set_stream(ambient)


def probe_global(pins: PinningThread) -> dict:
    model = deep_net().eval()
    x = torch.rand(8, 3, 128, 128, device="cuda")
    with torch.no_grad():
        control = global_capture(model, x)
        failures, errors, during = 0, [], 0
        for _ in range(10):
            start = pins.open_gate()
            error = global_capture(model, x)
            pins.gate.clear()
            during += pins.allocs - start
            if error is not None:
                failures += 1
                errors.append(error)
                break
    return {
        "control_ok": control is None,
        "control_error": control,
        "failures": failures,
        "errors": errors,
        "allocs_during": during,
        "thread_errors": pins.errors,
    }


def probe_ours(pins: PinningThread) -> dict:
    model = deep_net().eval()
    runner = GraphRunner(model)
    during, runner_equal = 0, []
    with torch.no_grad():
        for batch in (1, 2, 4, 8):
            x = torch.rand(batch, 3, 128, 128, device="cuda")
            start = pins.open_gate()
            out = runner(x)
            pins.gate.clear()
            during += pins.allocs - start
            runner_equal.append(bitwise_equal(out, model(x)))
    info = runner.info()
    runner_ok = all(runner_equal) and len(info.graphs) == 4 and not info.fallbacks

    eager = deep_net().train()
    graphed_copy = copy.deepcopy(eager)
    x = torch.rand(4, 3, 64, 64, device="cuda")
    start = pins.open_gate()
    graphed = graphed_callables(graphed_copy, (x.clone(),))
    pins.gate.clear()
    during += pins.allocs - start
    out_g, out_e = graphed(x), eager(x)
    out_g.square().mean().backward()
    out_e.square().mean().backward()
    callables_ok = bitwise_equal(out_g, out_e) and all(
        bitwise_equal(a.grad, b.grad) for a, b in zip(eager.parameters(), graphed_copy.parameters())
    )

    eager = deep_net().train()
    helper = GraphedTraining(copy.deepcopy(eager), repeat_threshold=1)
    start = pins.open_gate()
    loss_g = helper(x).square().mean()
    pins.gate.clear()
    during += pins.allocs - start
    loss_g.backward()
    eager(x).square().mean().backward()
    tinfo = helper.info()
    training_ok = (
        tinfo.latched is None
        and tinfo.replays == 1
        and all(bitwise_equal(a.grad, b.grad) for a, b in zip(eager.parameters(), helper.module.parameters()))
    )
    return {
        "runner_ok": runner_ok,
        "runner_equal": runner_equal,
        "runner_fallbacks": dict(info.fallbacks),
        "callables_ok": callables_ok,
        "training_ok": training_ok,
        "training_latched": tinfo.latched,
        "allocs_during": during,
        "thread_errors": pins.errors,
    }


class HostSync(nn.Module):
    """Reads a value back to the host mid-forward: fine eagerly, impossible inside a graph."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        if float(y.abs().max()) > 1e30:
            y = y * 0
        return torch.relu(y)


def random_ops_still_run() -> bool:
    """After a failed capture: random draws and a fresh layer's init work, and replay the same
    numbers a re-seeded generator gives (the failed capture moved nothing)."""
    try:
        torch.cuda.manual_seed(7)
        first = torch.rand(64, device="cuda")
        nn.Dropout(0.5).train()(torch.ones(64, device="cuda"))
        nn.Conv2d(3, 8, 3).cuda()  # init draws on the CPU; the move must not trip anything
        torch.cuda.manual_seed(7)
        return bool(torch.equal(first, torch.rand(64, device="cuda")))
    except RuntimeError as err:
        print(f"random op after the failed capture: {err}", file=sys.stderr)
        return False


def probe_latch_runner() -> dict:
    torch.manual_seed(0)
    model = HostSync().cuda().eval()
    x = torch.rand(2, 3, 16, 16, device="cuda")
    runner = GraphRunner(model)
    with torch.no_grad():
        equal = all(bitwise_equal(runner(x), model(x)) for _ in range(3))
    info = runner.info()
    latched = info.graphs == () and any("capture failed" in r for r in info.fallbacks)
    return {"equal": equal, "latched": latched, "rng_ok": random_ops_still_run(), "fallbacks": dict(info.fallbacks)}


def probe_latch_training() -> dict:
    torch.manual_seed(0)
    eager = HostSync().cuda().train()
    helper = GraphedTraining(copy.deepcopy(eager), repeat_threshold=1)
    x = torch.rand(2, 3, 16, 16, device="cuda")
    for _ in range(2):  # accumulate two steps in both
        helper(x).square().mean().backward()
        eager(x).square().mean().backward()
    equal = all(bitwise_equal(a.grad, b.grad) for a, b in zip(eager.parameters(), helper.module.parameters()))
    reason = helper.info().latched
    latched = reason is not None and "capture failed" in reason
    return {"equal": equal, "latched": latched, "rng_ok": random_ops_still_run(), "reason": reason}


def probe_latch_callables() -> dict:
    """graphed_callables raises on what it cannot capture (no latch there): the error reaches the
    caller, and the process's random ops still run."""
    model = HostSync().cuda()
    x = torch.rand(2, 3, 16, 16, device="cuda", requires_grad=True)
    try:
        graphed_callables(model, (x,))
        raised = ""
    except Exception as err:  # noqa: BLE001 - whatever torch raises for the host sync
        raised = f"{type(err).__name__}: {err}"[:300]
    stream_ok = torch.cuda.current_stream() == torch.cuda.default_stream()
    return {"equal": True, "latched": bool(raised), "raised": raised, "stream_ok": stream_ok,
            "rng_ok": random_ops_still_run()}


def main(mode: str) -> dict:
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    if mode == "latch_runner":
        return probe_latch_runner()
    if mode == "latch_training":
        return probe_latch_training()
    if mode == "latch_callables":
        return probe_latch_callables()
    pins = PinningThread()
    pins.start()
    try:
        return probe_global(pins) if mode == "global" else probe_ours(pins)
    finally:
        pins.stop.set()
        pins.gate.set()
        pins.join(timeout=10)


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("global", "ours", "latch_runner", "latch_training", "latch_callables"):
        sys.exit("usage: cg_pinned_probe.py global|ours|latch_runner|latch_training|latch_callables")
    print(json.dumps(main(sys.argv[1])))
