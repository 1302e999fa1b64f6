"""Prints which optional modules this Python can import (for the GPU machine's session log)."""

import importlib
import sys

NAMES = ("torchvision", "numpy", "scipy", "PIL", "cv2", "av", "matplotlib", "onnx", "onnxruntime", "openvino",
         "polars", "pycocotools", "httpx", "huggingface_hub", "tensorboard", "yaml", "tqdm")

for name in NAMES:
    try:
        module = importlib.import_module(name)
        print(f"{name:16s} {getattr(module, '__version__', '?')}")
    except Exception as exc:  # noqa: BLE001 - any failure means "not usable here"
        print(f"{name:16s} missing ({type(exc).__name__})")
if "onnxruntime" in sys.modules:
    print("onnxruntime providers:", sys.modules["onnxruntime"].get_available_providers())
