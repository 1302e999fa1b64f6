"""Runtime backends: an exported file (ONNX, TorchScript, OpenVINO folder) as the network a
``LibreYOLO`` facade holds, so predict and val run the same task code on it."""

from .backends import RuntimeNetwork, is_exported, load_exported

__all__ = ["RuntimeNetwork", "is_exported", "load_exported"]
