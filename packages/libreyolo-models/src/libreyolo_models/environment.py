"""``libreyolo checks``: what this installation has, as data (the CLI prints it).

One place answers the questions a bug report needs first: package versions, whether torch sees
CUDA and which GPUs, whether NCCL is there for multi-GPU training, which optional extras are
installed (export runtimes, loggers), and where the cache folder is.
"""

from __future__ import annotations

import importlib
import platform
import sys
from typing import Any

from .cache_dir import CACHE_DIR_ENV, cache_dir
from .optional import find_version

PACKAGES = ("libreyolo", "libreyolo-models", "libreyolo-cudagraph", "libreyolo-ddp", "libreyolo-cli", "torch",
            "torchvision", "numpy")

# extra -> the distributions it installs (the first one decides whether the extra counts as found).
EXTRAS = {"onnx": ("onnxruntime", "onnx", "onnxslim"), "openvino": ("openvino",), "nncf": ("nncf",),
          "ncnn": ("ncnn", "pnnx"), "tflite": ("ai-edge-litert", "onnx2tf", "tensorflow"), "coreml": ("coremltools",),
          "tensorrt": ("tensorrt-cu13", "tensorrt"), "tensorboard": ("tensorboard",),
          "mlflow": ("mlflow-skinny", "mlflow"), "wandb": ("wandb",), "comet": ("comet-ml",),
          "clearml": ("clearml",), "dvclive": ("dvclive",), "opencv": ("opencv-python-headless", "opencv-python")}


def environment_report() -> dict[str, Any]:
    """Versions, CUDA, GPUs, NCCL, extras, cache folder; plain data (JSON-serialisable)."""
    import torch

    cuda = torch.cuda.is_available()
    gpus = []
    if cuda:
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            gpus.append({"index": index, "name": props.name, "memory_gib": round(props.total_memory / 2**30, 1),
                         "capability": f"{props.major}.{props.minor}"})
    nccl = None
    if cuda and torch.distributed.is_available() and torch.distributed.is_nccl_available():
        version = torch.cuda.nccl.version()
        nccl = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    extras = {}
    for extra, dists in EXTRAS.items():
        found = {d: v for d in dists if (v := find_version(d)) is not None}
        extras[extra] = found or None
    onnx_providers = None
    if extras["onnx"]:
        try:
            onnx_providers = list(importlib.import_module("onnxruntime").get_available_providers())
        except ImportError:  # listed by metadata but not importable (a broken install)
            onnx_providers = []
    root = cache_dir()
    return {"python": sys.version.split()[0], "platform": platform.platform(),
            "packages": {name: find_version(name) for name in PACKAGES},
            "torch_cuda": torch.version.cuda, "cuda_available": cuda, "gpus": gpus, "nccl": nccl,
            "gloo": torch.distributed.is_available() and torch.distributed.is_gloo_available(),
            "extras": extras, "onnxruntime_providers": onnx_providers,
            "cache_dir": str(root), "cache_dir_exists": root.is_dir(), "cache_dir_env": CACHE_DIR_ENV}
