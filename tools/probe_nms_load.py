#!/usr/bin/env python
"""How this machine's NMS operators load, and whether ours match torchvision's package (GPU).

In a fresh process: which way ``layers.nms_kernel`` loaded torchvision's operator library (the
direct load or the package's own import), how long it took, and whether ``torchvision`` or
``torch._dynamo`` got imported; then ``batched_nms`` against ``torchvision.ops.batched_nms`` on
CUDA, on both of its branches (class offsets, and one NMS per class above 20,000 coordinates).

    python tools/probe_nms_load.py
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

import torch


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # no options; --help
    if not torch.cuda.is_available():
        sys.exit("probe_nms_load needs a CUDA GPU")
    logging.basicConfig(level=logging.DEBUG, format="%(name)s: %(message)s")
    from libreyolo_models.layers import nms_kernel

    t0 = time.perf_counter()
    nms_kernel._nms_op()
    print(f"operators ready in {(time.perf_counter() - t0) * 1e3:.0f} ms; torchvision imported: "
          f"{'torchvision' in sys.modules}; torch._dynamo imported: {'torch._dynamo' in sys.modules}")
    import torchvision
    import torchvision.ops

    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, CUDA {torch.version.cuda}")
    g = torch.Generator(device="cuda").manual_seed(0)
    failures = 0
    for n in (300, 3_000, 30_000):
        xy = torch.rand(n, 2, device="cuda", generator=g) * 600
        wh = torch.rand(n, 2, device="cuda", generator=g) * 120 + 4
        boxes = torch.cat((xy, xy + wh), 1)
        scores = torch.rand(n, device="cuda", generator=g)
        classes = torch.randint(0, 80, (n,), device="cuda", generator=g)
        ours = nms_kernel.batched_nms(boxes, scores, classes, 0.6)
        theirs = torchvision.ops.batched_nms(boxes, scores, classes, 0.6)
        same = torch.equal(ours, theirs)
        failures += not same
        print(f"{n} boxes ({'per class' if boxes.numel() > 20_000 else 'offsets'}): kept {ours.numel()}, "
              f"identical to torchvision.ops: {same}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
