"""Options of ``model.export`` / ``libreyolo export``."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import suggest
from ..errors import ConfigError
from ..runtime.metadata import EXPORT_FORMATS
from ..settings import check_positive_imgsz
from .targets import TARGETS, get_target

DEFAULT_OPSET = 17
"""The opset written unless the user or the family asks for another: every runtime we test reads it."""


@dataclass(frozen=True)
class ExportConfig:
    """Options of ``model.export`` / ``libreyolo export``.

    Attributes:
        format: ``onnx``, ``torchscript``, ``openvino``, ``ncnn``, ``tflite``, ``coreml`` or
            ``engine`` (TensorRT; built on the NVIDIA GPU it will run on). See ``targets.TARGETS``
            for what each carries and docs/export.md for the extra each needs.
        imgsz: square input size (default: the model's).
        batch: input batch size the file is built for; a runtime runs other batch sizes in
            chunks of it (padded), so a batch-1 file still validates at batch 16.
        dynamic: batch, height and width are free dimensions of the graph: the exported model
            predicts and validates at any ``imgsz=`` that is a multiple of the stride (``imgsz``
            here is then its default). A family whose seam is laid out for one size declares
            ``dynamic_imgsz=False`` (RT-DETR): its export frees the batch only, keeps ``imgsz``
            and logs a warning saying why. Without ``dynamic`` the file runs at ``imgsz`` only.
        half: fp16 weights and inputs; ONNX, TorchScript and TensorRT export on a CUDA device for
            it; OpenVINO, NCNN, TFLite and CoreML store fp16 weights from an fp32 trace on any device.
        int8: post-training INT8 quantisation, calibrated on ``calib_images`` images of ``data``
            (its ``train`` split, else ``val``): OpenVINO through NNCF (extra ``nncf``), ONNX
            through onnxruntime's static quantiser (QDQ, per-channel weights). The box/score
            decoding at the end of the head stays in float (see ``export.int8``).
        data: the dataset whose images calibrate ``int8`` (a data.yaml path or a bundled name
            such as ``shapes``); required with ``int8=True``.
        calib_images: how many images calibrate ``int8`` (the first of the split, in order).
        workspace: TensorRT builder memory in GiB (``engine`` only).
        simplify: run onnxslim over the ONNX graph (ONNX and OpenVINO).
        opset: ONNX opset; None: 17, or the first opset with an operator the family needs (19
            for BiRefNet's ``DeformConv``).
        device: where the network is traced (default: the model's device). A TorchScript file
            runs on that device type only (the trace records where anchor grids are made).
        file: output path (default: next to the checkpoint, or the weights name in the working
            folder; OpenVINO writes a folder ``<stem>_openvino_model``).
    """

    format: str = "onnx"
    imgsz: int | None = None
    batch: int = 1
    dynamic: bool = False
    half: bool = False
    simplify: bool = False
    opset: int | None = None
    device: str | None = None
    file: str | None = None
    int8: bool = False
    data: str | None = None
    calib_images: int = 128
    workspace: float = 4.0

    def __post_init__(self) -> None:
        if self.format not in EXPORT_FORMATS:
            raise ConfigError(f"format={self.format!r} is not an export format; use one of "
                              f"{', '.join(EXPORT_FORMATS)}" + suggest(self.format, EXPORT_FORMATS))
        if self.batch < 1:
            raise ConfigError(f"batch={self.batch} must be at least 1")
        if self.opset is not None and not 11 <= self.opset <= 21:
            raise ConfigError(f"opset={self.opset} must be between 11 and 21 (17 suits every runtime we test)")
        check_positive_imgsz(self.imgsz)
        target = get_target(self.format)
        if self.int8:
            if not target.int8:
                raise ConfigError(f"int8=True: format={self.format!r} has no INT8 path here; use format='openvino' "
                                  "(NNCF) or format='onnx' (onnxruntime's static quantiser)")
            if self.half:
                raise ConfigError("int8=True and half=True both set the weights' precision; pass one of them")
            if not self.data:
                raise ConfigError("int8=True needs data=... (a data.yaml or a bundled name such as 'shapes') whose "
                                  "images calibrate the quantisation ranges")
        if self.calib_images < 1:
            raise ConfigError(f"calib_images={self.calib_images} must be at least 1 (a few hundred suit most sets)")
        if self.dynamic and not target.dynamic:
            raise ConfigError(f"dynamic=True: a {self.format} export is written for one batch and image size; "
                              f"leave dynamic off and export once per imgsz you need (dynamic shapes: "
                              f"{', '.join(t.name for t in TARGETS.values() if t.dynamic)})")
        if self.workspace <= 0:
            raise ConfigError(f"workspace={self.workspace} GiB must be positive")
