"""Runtime backends: an exported file (ONNX, TorchScript, TFLite; an OpenVINO, NCNN or TensorRT
folder; CoreML on macOS) as the network a
``LibreYOLO`` facade holds, so predict and val run the same task code on it."""

from .backends import RuntimeNetwork, is_exported, load_exported

__all__ = ["RuntimeNetwork", "is_exported", "load_exported"]
