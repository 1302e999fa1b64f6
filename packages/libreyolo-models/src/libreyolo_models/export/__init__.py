"""Export a model's inference seam to ONNX, TorchScript, OpenVINO, NCNN, TFLite, CoreML or a
TensorRT engine (INT8 for OpenVINO and ONNX), and the metadata that lets
``LibreYOLO("best.onnx")`` rebuild the model around it (see ``runtime`` for the loading side)."""

from ..runtime.metadata import EXPORT_FORMATS, ExportMetadata
from .exporter import export_model
from .settings import ExportConfig

__all__ = ["EXPORT_FORMATS", "ExportConfig", "ExportMetadata", "export_model"]
