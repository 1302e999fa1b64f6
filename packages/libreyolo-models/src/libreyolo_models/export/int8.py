"""Post-training INT8 quantisation with calibration images (``export(int8=True, data=...)``).

Calibration images go through the task's validation pipeline (letterbox, scale to [0, 1]), so
the quantiser sees exactly the pixels predict and val feed the exported graph. Two paths:

- **OpenVINO** through NNCF (extra ``nncf``): ``nncf.quantize`` on the converted IR, mixed preset
  (symmetric weights, asymmetric activations). The element-wise tail of a detection head
  (sigmoid, softmax, the multiplies and subtractions that decode boxes in pixels) is left in
  float: one output tensor holds pixel coordinates and probabilities side by side, and a single
  8-bit scale for both washes out the scores. Measured on YOLOv9-t / shapes (docs/export.md):
  NNCF's defaults mAP50-95 0.676, with this tail in float 0.681 (fp32 0.679).
- **ONNX Runtime** through its static quantiser (extra ``onnx``): QDQ format, per-channel int8
  weights and uint8 activations, on the operators that carry the arithmetic (Conv, MatMul,
  Gemm) only, for the same reason. Measured on YOLOv9-t / shapes (docs/export.md): quantising
  every operator dropped mAP50 from 0.861 to 0.000; these operators only, 0.863.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..errors import ConfigError
from ..optional import require
from .formats import embed_onnx_metadata, write_onnx_graph
from .settings import ExportConfig
from .writing import WriteJob

if TYPE_CHECKING:
    from ..handle import ModelHandle

log = logging.getLogger(__name__)

NNCF_FLOAT_TYPES = ["Sigmoid", "Softmax", "Multiply", "Subtract", "Divide"]
"""OpenVINO operation types NNCF leaves in float (the head's decoding; SiLU's multiply too)."""

ORT_QUANTIZED_OPS = ["Conv", "MatMul", "Gemm"]
"""ONNX operators onnxruntime's static quantiser turns into int8; the rest stays float."""


def calibration_batches(model: ModelHandle, cfg: ExportConfig, imgsz: int) -> list[np.ndarray]:
    """The first ``cfg.calib_images`` images of ``cfg.data`` (its ``train`` split, else ``val``) as
    float32 ``[b, 3, imgsz, imgsz]`` arrays in [0, 1], ``b`` the exported batch (1 when dynamic);
    a short last batch is filled up with the first images."""
    task = model.task_spec
    data = task.load_data(cfg.data)
    split = "train" if task.has_split(data, "train") else "val"
    if not task.has_split(data, split):
        raise ConfigError(f"int8=True: data={cfg.data!r} has neither a train nor a val split to calibrate on")
    index = task.load_split(data, split)
    pipeline = task.val_pipeline(index, imgsz=imgsz, batch_size=8, device=torch.device("cpu"), workers=0,
                                 cache="off")
    images: list[torch.Tensor] = []
    for batch in pipeline:
        images.extend(batch.images.float())
        if len(images) >= cfg.calib_images:
            break
    images = images[:cfg.calib_images]
    if not images:
        raise ConfigError(f"int8=True: the {split} split of data={cfg.data!r} yielded no images to calibrate on")
    step = 1 if cfg.dynamic else cfg.batch
    while len(images) % step:
        images.append(images[len(images) % step])
    stacked = torch.stack(images).numpy()
    log.info("int8 calibration: %d images of %s (%s split) at %d px", len(images), cfg.data, split, imgsz)
    return [np.ascontiguousarray(stacked[i:i + step]) for i in range(0, len(stacked), step)]


def quantize_openvino(ov_model: Any, calibration: list[np.ndarray]) -> Any:
    """The IR ``ov_model`` with INT8 weights and activations, ranges from ``calibration`` (NNCF)."""
    nncf = require("nncf", "nncf", "export(format='openvino', int8=True)")
    scope = nncf.IgnoredScope(types=NNCF_FLOAT_TYPES, validate=False)
    return nncf.quantize(ov_model, nncf.Dataset(calibration), subset_size=len(calibration),
                         preset=nncf.QuantizationPreset.MIXED, ignored_scope=scope)


class _Reader:
    """onnxruntime's calibration reader protocol over the prepared batches."""

    def __init__(self, name: str, calibration: list[np.ndarray]) -> None:
        self._name, self._batches = name, iter(calibration)

    def get_next(self) -> dict[str, np.ndarray] | None:
        batch = next(self._batches, None)
        return None if batch is None else {self._name: batch}


def write_onnx_int8(job: WriteJob) -> Path:
    """An ONNX file whose Conv/MatMul/Gemm run in INT8 (QDQ), calibrated on ``job.calibration``."""
    require("onnx", "onnx", "export(format='onnx', int8=True)")
    quantization = require("onnxruntime.quantization", "onnx", "export(format='onnx', int8=True)")
    if job.calibration is None:
        raise ConfigError("export(format='onnx', int8=True) was given no calibration images")
    with tempfile.TemporaryDirectory() as tmp:
        fp32, prepared = Path(tmp) / "fp32.onnx", Path(tmp) / "prepared.onnx"
        write_onnx_graph(job.seam, job.example, fp32, job.meta, opset=job.opset)
        quantization.quant_pre_process(str(fp32), str(prepared))  # shape inference the quantiser needs
        quantization.quantize_static(
            str(prepared), str(job.path), _Reader("images", job.calibration),
            quant_format=quantization.QuantFormat.QDQ, op_types_to_quantize=ORT_QUANTIZED_OPS, per_channel=True,
            activation_type=quantization.QuantType.QUInt8, weight_type=quantization.QuantType.QInt8)
    embed_onnx_metadata(job.path, job.meta)
    return job.path
