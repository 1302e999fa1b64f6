"""PP-OCR's declaration: data only (no torch import), read by the registry and the CLI."""

from __future__ import annotations

from ...contract.spec import FamilySpec, TaskDecl

SPEC = FamilySpec(
    name="ppocr",
    display_name="PP-OCRv4",
    weight_prefix="LibrePPOCR",
    sizes=("m",),  # PP-OCRv4 mobile: the DB detector and the SVTR-CTC recogniser (Chinese + English dictionary)
    default_size="m",
    tasks={
        "ocr": TaskDecl(
            loss_names=(),
            default_imgsz=736,  # RapidOCR's detector limit: the short side is brought up to it (multiples of 32)
            default_nc=1,       # one nominal class: "text"
            # Parity row m green on the H100 (docs/parity-matrix.md, eighth run): the detector is
            # captured once per padded input shape, the recognizer per width bucket.
            inference_capture=True,
            train_capture=False,
            exportable=False,
            export_note=("PP-OCR is two networks with eager work between them (DB boxes, perspective crops, "
                         "CTC decoding); the published ONNX files are the export: python -m libreyolo_models.convert ppocr reads them"),
        ),
    },
    implementation="libreyolo_models.families.ppocr.family:PPOCRFamily",
    stride=32,
    ddp_autospawn=False,  # inference only
    sync_bn_default=False,
    summary="PP-OCRv4 mobile text detection (DB) and recognition (SVTR + CTC), converted from RapidOCR's ONNX files",
    weights_note=("PP-OCR's weights are made from RapidOCR's ONNX files: python -m libreyolo_models.convert ppocr "
                  "--models <rapidocr_onnxruntime/models> --out LibrePPOCRm.pt"),
)
