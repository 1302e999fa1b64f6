"""Convert RapidOCR's PP-OCRv4 ONNX files into a LibreYOLO checkpoint (``LibrePPOCRm.pt``).

The ONNX files ship inside the ``rapidocr_onnxruntime`` wheel (Apache-2.0), under
``rapidocr_onnxruntime/models/``: ``ch_PP-OCRv4_det_infer.onnx``, ``ch_PP-OCRv4_rec_infer.onnx`` and
the angle classifier ``ch_ppocr_mobile_v2.0_cls_infer.onnx``.

    python tools/convert_ppocr.py --models path/to/rapidocr_onnxruntime/models --out LibrePPOCRm.pt
    libreyolo predict model=LibrePPOCRm.pt source=page.png --save

With ``--check`` it also runs both networks under onnxruntime on random inputs and prints the
largest differences (needs ``onnxruntime``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DET = "ch_PP-OCRv4_det_infer.onnx"
REC = "ch_PP-OCRv4_rec_infer.onnx"
CLS = "ch_ppocr_mobile_v2.0_cls_infer.onnx"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", type=Path, required=True, help=f"folder holding {DET}, {REC} and {CLS}")
    parser.add_argument("--out", type=Path, default=Path("LibrePPOCRm.pt"))
    parser.add_argument("--check", action="store_true", help="compare with onnxruntime after converting")
    args = parser.parse_args(argv)
    det, rec, angle = args.models / DET, args.models / REC, args.models / CLS
    for path in (det, rec, angle):
        if not path.is_file():
            print(f"error: {path} not found; --models must be the rapidocr_onnxruntime/models folder "
                  f"holding {DET}, {REC} and {CLS}", file=sys.stderr)
            return 2

    from libreyolo_models import LibreYOLO
    from libreyolo_models.families.ppocr.onnx_weights import convert

    model = LibreYOLO("LibrePPOCRm.yaml")
    convert(det, rec, angle, model.net)
    print(f"wrote {model.save(args.out)}")
    if args.check:
        from libreyolo_models.families.ppocr.parity import compare_with_onnxruntime

        for name, diff in compare_with_onnxruntime(model.net, det, rec, angle).items():
            print(f"{name}: max abs diff {diff:.3g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
