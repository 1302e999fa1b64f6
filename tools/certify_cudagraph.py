#!/usr/bin/env python
"""Certify inference graph parity of one or more modules, each in a fresh Python process.

Each ``--factory package.module:callable`` is built, moved to the GPU in eval mode and checked
with ``libreyolo_cudagraph.verify_parity`` on two contrasting probes, once per requested
precision. One line per run; exit status 1 if any run failed.

    python tools/certify_cudagraph.py --factory torchvision.models:resnet18 \
        --kwargs '{"weights": null}' --input-shape 1,3,224,224 --precisions fp32,fp16
"""

from __future__ import annotations

import argparse
import json
import sys

from libreyolo_cudagraph import certify_in_subprocess

AUTOCAST = {"fp32": None, "fp16": "float16", "bf16": "bfloat16"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--factory", action="append", required=True, help="package.module:callable returning the module"
    )
    p.add_argument("--kwargs", default="{}", help="JSON keyword arguments for every factory")
    p.add_argument("--input-shape", default="1,3,224,224")
    p.add_argument(
        "--precisions", default="fp32,fp16", help=f"any of {', '.join(AUTOCAST)} (fp16/bf16 via autocast)"
    )
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--timeout-s", type=float, default=600.0)
    args = p.parse_args(argv)
    shape = [int(s) for s in args.input_shape.split(",")]
    failed = 0
    for factory in args.factory:
        for precision in args.precisions.split(","):
            if precision not in AUTOCAST:
                sys.exit(f"--precisions: {precision!r} is not one of {', '.join(AUTOCAST)}")
            print(f"certifying {factory} {precision} ...", file=sys.stderr, flush=True)
            report = certify_in_subprocess(
                factory,
                kwargs=json.loads(args.kwargs),
                input_shape=shape,
                autocast=AUTOCAST[precision],
                channels_last=args.channels_last,
                timeout_s=args.timeout_s,
            )
            failed += not report.ok
            print(f"[{precision}] {report.summary()}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
