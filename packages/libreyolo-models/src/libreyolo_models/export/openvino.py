"""OpenVINO export: the ONNX graph converted to an IR folder, INT8-quantised by NNCF on request."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..optional import require
from ..runtime.metadata import METADATA_FILE, ExportMetadata
from .formats import slim_onnx, write_onnx_graph
from .int8 import quantize_openvino


def write_openvino(module: nn.Module, example: torch.Tensor, folder: Path, meta: ExportMetadata, *,
                   opset: int, simplify: bool, calibration: list[np.ndarray] | None = None) -> Path:
    """An OpenVINO IR folder (``model.xml``/``.bin`` + ``libreyolo.json``), converted from ONNX:
    the one path that keeps dynamic dimensions and the same operators as the ONNX export. With
    ``calibration``, NNCF quantises it to INT8 first (``int8.quantize_openvino``)."""
    ov = require("openvino", "openvino", "export(format='openvino')")
    if calibration is not None:
        require("nncf", "nncf", "export(format='openvino', int8=True)")
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = Path(tmp) / "model.onnx"
        write_onnx_graph(module, example, onnx_path, meta, opset=opset)
        if simplify:
            slim_onnx(onnx_path, "export(format='openvino', simplify=True)")
        ov_model = ov.convert_model(str(onnx_path))
        if calibration is not None:
            ov_model = quantize_openvino(ov_model, calibration)
        ov.save_model(ov_model, str(folder / "model.xml"), compress_to_fp16=meta.half)
    (folder / METADATA_FILE).write_text(meta.to_json() + "\n")
    return folder
