"""RapidOCR's PP-OCRv4 ONNX files converted to our network, for the tests that need real weights
(they skip when the files are not here)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from libreyolo_models.families.ppocr.ctc import characters
from libreyolo_models.families.ppocr.nn import PPOCRNet

DET, REC, CLS = "ch_PP-OCRv4_det_infer.onnx", "ch_PP-OCRv4_rec_infer.onnx", "ch_ppocr_mobile_v2.0_cls_infer.onnx"


def _onnx_dir() -> Path | None:
    """RapidOCR's model folder: ``PPOCR_ONNX_DIR``, or that of an installed ``rapidocr_onnxruntime``
    (located, not imported: its own imports need pyclipper and shapely, which a ``--no-deps``
    install for these files leaves out)."""
    env = os.environ.get("PPOCR_ONNX_DIR")
    if env:
        return Path(env)
    import importlib.util

    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "models"


def converted_weights() -> tuple[PPOCRNet, Path]:
    folder = _onnx_dir()
    if folder is None or not all((folder / f).is_file() for f in (DET, REC, CLS)):
        pytest.skip("RapidOCR's PP-OCRv4 ONNX files are not here: set PPOCR_ONNX_DIR to rapidocr_onnxruntime/models "
                    "(the rapidocr_onnxruntime wheel on PyPI ships them) to compare with onnxruntime")
    pytest.importorskip("onnxruntime")
    from libreyolo_models.families.ppocr.onnx_weights import convert

    net = PPOCRNet(len(characters())).eval()
    convert(folder / DET, folder / REC, folder / CLS, net)
    return net, folder
