"""Converters from weights published in another format into LibreYOLO checkpoints.

A family whose authors publish no PyTorch checkpoint is converted here from what they do publish
(the mapping itself lives in the family's folder; this module builds the model and saves it):

- ``ppocr``: RapidOCR's PP-OCRv4 ONNX files (Apache-2.0), shipped inside the ``rapidocr_onnxruntime``
  wheel under ``rapidocr_onnxruntime/models/``: the detector ``ch_PP-OCRv4_det_infer.onnx``, the
  recogniser ``ch_PP-OCRv4_rec_infer.onnx`` and the angle classifier
  ``ch_ppocr_mobile_v2.0_cls_infer.onnx``. ``--check`` runs both sides under onnxruntime on random
  inputs and prints the largest differences.

    python -m libreyolo_models.convert ppocr --models path/to/rapidocr_onnxruntime/models --out LibrePPOCRm.pt
    libreyolo predict model=LibrePPOCRm.pt source=page.png --save
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DET = "ch_PP-OCRv4_det_infer.onnx"
REC = "ch_PP-OCRv4_rec_infer.onnx"
CLS = "ch_ppocr_mobile_v2.0_cls_infer.onnx"
PPOCR_COMMAND = "python -m libreyolo_models.convert ppocr --models <rapidocr_onnxruntime/models> --out LibrePPOCRm.pt"
"""How a user makes PP-OCR's weights (named in errors and docs)."""


def convert_ppocr(models: Path, out: Path, *, check: bool = False) -> Path:
    """``LibrePPOCRm.pt`` at ``out`` from the three ONNX files in ``models``; with ``check``, the
    largest difference from onnxruntime per network is printed."""
    det, rec, angle = models / DET, models / REC, models / CLS
    missing = [str(p) for p in (det, rec, angle) if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"{', '.join(missing)} not found; --models must be the rapidocr_onnxruntime/models "
                                f"folder holding {DET}, {REC} and {CLS} (pip download rapidocr_onnxruntime, then "
                                "unzip the wheel)")
    from .facade import LibreYOLO
    from .families.ppocr.onnx_weights import convert

    model = LibreYOLO("LibrePPOCRm.yaml")
    convert(det, rec, angle, model.net)
    path = model.save(out)
    if check:
        from .families.ppocr.parity import compare_with_onnxruntime

        for name, diff in compare_with_onnxruntime(model.net, det, rec, angle).items():
            print(f"{name}: max abs diff {diff:.3g}")
    return Path(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m libreyolo_models.convert", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("family", choices=("ppocr",))
    parser.add_argument("--models", type=Path, required=True, help=f"folder holding {DET}, {REC} and {CLS}")
    parser.add_argument("--out", type=Path, default=Path("LibrePPOCRm.pt"))
    parser.add_argument("--check", action="store_true", help="compare with onnxruntime after converting")
    args = parser.parse_args(argv)
    try:
        print(f"wrote {convert_ppocr(args.models, args.out, check=args.check)}")
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
