"""Options of ``model.export`` / ``libreyolo export``."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import suggest
from ..errors import ConfigError
from ..runtime.metadata import EXPORT_FORMATS
from ..settings import check_positive_imgsz


@dataclass(frozen=True)
class ExportConfig:
    """Options of ``model.export`` / ``libreyolo export``.

    Attributes:
        format: ``onnx``, ``torchscript`` or ``openvino``.
        imgsz: square input size (default: the model's).
        batch: input batch size the file is built for; a runtime runs other batch sizes in
            chunks of it (padded), so a batch-1 file still validates at batch 16.
        dynamic: batch, height and width are free dimensions of the graph: the exported model
            predicts and validates at any ``imgsz=`` that is a multiple of the stride (``imgsz``
            here is then its default). A family whose seam is laid out for one size declares
            ``dynamic_imgsz=False`` (RT-DETR): its export frees the batch only, keeps ``imgsz``
            and logs a warning saying why. Without ``dynamic`` the file runs at ``imgsz`` only.
        half: fp16 weights and inputs; ONNX and TorchScript export on a CUDA device for it,
            OpenVINO compresses its weights to fp16 on any device.
        simplify: run onnxslim over the ONNX graph (ONNX and OpenVINO).
        opset: ONNX opset.
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
    opset: int = 17
    device: str | None = None
    file: str | None = None

    def __post_init__(self) -> None:
        if self.format not in EXPORT_FORMATS:
            raise ConfigError(f"format={self.format!r} is not an export format; use one of "
                              f"{', '.join(EXPORT_FORMATS)}" + suggest(self.format, EXPORT_FORMATS))
        if self.batch < 1:
            raise ConfigError(f"batch={self.batch} must be at least 1")
        if not 11 <= self.opset <= 21:
            raise ConfigError(f"opset={self.opset} must be between 11 and 21 (17 suits every runtime we test)")
        check_positive_imgsz(self.imgsz)
