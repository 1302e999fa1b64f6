#!/usr/bin/env python
"""Whether Dynamo compiles inside our capture of a compiled forward (GPU).

``test_gpu_zoo.py::test_compile_with_cuda_graph_replays_the_compiled_call_bit_for_bit`` failed on
torch 2.11 (H100 and H200, 2026-12-05): predict with ``compile=True, cuda_graph=True`` compiled a
frame *during* the capture ("operation not permitted when stream is capturing (in
BackendCompilerFailed)"), so the graph latched to eager. The cause was the runner's operator
scan (docs/cuda-graphs.md; fixed in ``libreyolo_cudagraph.hazards``). This replays the test's
calls with the frames Dynamo traces, its recompile and graph-break logs on stderr (outside
pytest's log capture) and, per call, guard failures, Dynamo's counters and our graphs.

    python tools/probe_compile_capture.py 2> compile-capture.log
"""

from __future__ import annotations

import logging
import sys

import torch


def main() -> int:
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 1
    import torch._dynamo.utils as dynamo_utils

    from libreyolo_models import SAMPLE_IMAGE, LibreYOLO9

    # dynamo=INFO names every frame Dynamo starts tracing (file and line): on torch 2.11 (H100,
    # 2026-12-05) the capture traced make_anchors (layers/anchors.py) as a frame of its own: the
    # runner's operator scan had knocked the compiled frame off (docs/cuda-graphs.md; fixed in
    # libreyolo_cudagraph.hazards). Expect no frame after "compile" once the fix holds.
    torch._logging.set_logs(dynamo=logging.INFO, recompiles=True, recompiles_verbose=True, graph_breaks=True,
                            guards=False)
    torch.manual_seed(0)
    model = LibreYOLO9(size="t", nc=80, device=0)
    steps = [("eager", {}), ("compile", {"compile": True}),
             ("compile + graph (captures)", {"compile": True, "cuda_graph": True}),
             ("compile + graph (replays)", {"compile": True, "cuda_graph": True})]
    for name, options in steps:
        print(f"=== {name}", file=sys.stderr, flush=True)
        results = model(SAMPLE_IMAGE, conf=0.3, half=True, **options)
        counters = {k: dict(v) for k, v in dynamo_utils.counters.items() if k in ("recompiles", "stats", "frames")}
        graphs = model.graph_info()["graphs"]
        failures = {getattr(code, "co_name", str(code)): [str(r)[:300] for r in reasons]
                    for code, reasons in getattr(dynamo_utils, "guard_failures", {}).items()}
        print(f"{name}: guard failures {failures}", flush=True)
        print(f"{name}: {len(results[0])} boxes; graphs {[(g.get('signature'), g.get('replays')) for g in graphs]}; "
              f"dynamo counters {counters}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
