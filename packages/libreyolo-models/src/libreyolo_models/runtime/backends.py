"""Runtime backends behind the inference seam: ONNX Runtime, TorchScript and OpenVINO here,
NCNN / TFLite / CoreML in ``mobile``, TensorRT in ``tensorrt``.

A backend is an ``nn.Module`` whose forward is the exported ``inference_forward``: images in,
the family's inference outputs out, as torch tensors on the device the model was moved to. The
facade holds it where it holds the PyTorch network, so ``model.device``, ``predict`` and ``val``
keep working unchanged; what needs a PyTorch network (train, fuse, CUDA graphs, saving) is
refused by the facade.

A file exported at a fixed batch runs any batch: the backend feeds it chunks of that batch and
pads the last one, so a batch-1 ONNX file still validates with ``batch=16``. A file exported with
``dynamic=True`` takes any batch and (where its family allows, ``ExportMetadata.dynamic_imgsz``)
any multiple of the stride as height and width: predict and val letterbox to the ``imgsz`` the
caller asks, checked by ``LibreYOLO.resolve_imgsz`` before any image is read.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..errors import CheckpointError, ConfigError
from ..layers.nms_kernel import load_torchvision_ops
from ..optional import require
from .metadata import METADATA_FILE, METADATA_KEY, ExportMetadata
from .mobile import CoreMLNetwork, NcnnNetwork, TFLiteNetwork, read_folder_metadata
from .network import DTYPES, RuntimeNetwork, cpu_threads, numpy_input
from .tensorrt import TensorRTNetwork

log = logging.getLogger(__name__)

FILE_SUFFIXES = (".onnx", ".torchscript", ".tflite", ".mlpackage")
"""Exports that are one file (a CoreML ``.mlpackage`` is a folder with this suffix); the others
are folders holding ``libreyolo.json`` (OpenVINO, NCNN, TensorRT), told apart by its ``format``."""


def is_exported(model: object) -> bool:
    """Whether ``model`` names an exported model: a file of ``FILE_SUFFIXES`` or an export folder."""
    if not isinstance(model, str | Path):
        return False
    path = Path(model)
    if path.suffix.lower() in FILE_SUFFIXES:
        return True
    return path.is_dir() and (path / METADATA_FILE).is_file()


FOLDER_BACKENDS: dict[str, Callable[[Path], RuntimeNetwork]] = {}
"""``libreyolo.json``'s format -> the backend of an export folder (filled below the classes)."""


def load_exported(model: str | Path) -> RuntimeNetwork:
    """The backend for ``model``, chosen from the file; ``FileNotFoundError`` / ``CheckpointError``
    naming it when it is missing or was not written by ``model.export``."""
    path = Path(model)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such exported model (export one with model.export(format=...))")
    suffix = path.suffix.lower()
    if suffix == ".mlpackage":
        return CoreMLNetwork(path)
    if path.is_dir():
        meta = read_folder_metadata(path)
        if meta.format not in FOLDER_BACKENDS:
            raise CheckpointError(f"{path}: its {METADATA_FILE} says format {meta.format!r}, which no backend here "
                                  f"loads as a folder ({', '.join(FOLDER_BACKENDS)}); re-export the model")
        return FOLDER_BACKENDS[meta.format](path)
    if suffix == ".onnx":
        return OnnxNetwork(path)
    if suffix == ".tflite":
        return TFLiteNetwork(path)
    return TorchScriptNetwork(path)


class OnnxNetwork(RuntimeNetwork):
    """onnxruntime; the CUDA execution provider when the model is on a GPU and onnxruntime has it."""

    kind = "onnxruntime"

    def __init__(self, path: Path) -> None:
        onnx_rt = require("onnxruntime", "onnx", f"LibreYOLO({str(path)!r})")
        self._ort = onnx_rt
        options = onnx_rt.SessionOptions()
        options.log_severity_level = 3
        options.intra_op_num_threads = cpu_threads()
        self._options = options
        session = onnx_rt.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        props = session.get_modelmeta().custom_metadata_map
        if METADATA_KEY not in props:
            raise CheckpointError(f"{path}: an ONNX file without LibreYOLO metadata (key {METADATA_KEY!r}); only "
                                  "files written by model.export(format='onnx') load as models")
        super().__init__(path, ExportMetadata.from_json(props[METADATA_KEY], str(path)))
        self._sessions: dict[str, Any] = {"cpu": session}

    def _session(self) -> Any:
        kind = self.anchor.device.type
        if kind not in self._sessions:
            available = self._ort.get_available_providers()
            if kind == "cuda" and "CUDAExecutionProvider" in available:
                providers = [("CUDAExecutionProvider", {"device_id": self.anchor.device.index or 0}),
                             "CPUExecutionProvider"]
                self._sessions[kind] = self._ort.InferenceSession(str(self.path), self._options, providers=providers)
            else:
                log.warning("onnxruntime has no execution provider for %s (available: %s); running on the CPU",
                            self.anchor.device, ", ".join(available))
                self._sessions[kind] = self._sessions["cpu"]
        return self._sessions[kind]

    def run(self, images: Tensor) -> list[Tensor]:
        session = self._session()
        feed = {session.get_inputs()[0].name: numpy_input(images, self.meta.input_dtype)}
        return [torch.from_numpy(np.asarray(out)) for out in session.run(None, feed)]


class TorchScriptNetwork(RuntimeNetwork):
    """A traced TorchScript module (``torch.jit.load``); it moves with ``model.to(device)``."""

    kind = "torchscript"

    def __init__(self, path: Path) -> None:
        files = {METADATA_FILE: ""}
        load_torchvision_ops()  # a trace may call torchvision's operators (deform_conv2d, BiRefNet)
        try:
            with warnings.catch_warnings():  # torch.jit's deprecation notice is not the user's to act on
                warnings.simplefilter("ignore", FutureWarning)
                script = torch.jit.load(str(path), map_location="cpu", _extra_files=files)
        except RuntimeError as err:
            raise CheckpointError(f"{path}: not a TorchScript file ({str(err).splitlines()[0]})") from None
        if not files[METADATA_FILE]:
            raise CheckpointError(f"{path}: a TorchScript file without LibreYOLO metadata ({METADATA_FILE}); only "
                                  "files written by model.export(format='torchscript') load as models")
        super().__init__(path, ExportMetadata.from_json(files[METADATA_FILE], str(path)))
        self.script = script

    @property
    def runs_only_on(self) -> str | None:
        """A trace records tensors made inside the network (anchor grids) on the device it ran on."""
        return str(self.meta.extra.get("traced_on", "cpu"))

    def run(self, images: Tensor) -> list[Tensor]:
        traced_on = self.runs_only_on
        if traced_on != self.anchor.device.type:
            raise ConfigError(f"{self.path} was traced on {traced_on} and runs only there; "
                              + ("move it with model.to(0)" if traced_on == "cuda" else "keep it on the CPU")
                              + f", or re-export from the .pt with device={'cpu' if traced_on == 'cuda' else 0}")
        with torch.no_grad():
            out = self.script(images.to(self.anchor.device, DTYPES[self.meta.input_dtype]))
        return list(out) if isinstance(out, tuple | list) else [out]


OPENVINO_PRECISION_ENV = "LIBREYOLO_OPENVINO_PRECISION"
"""Environment variable that picks OpenVINO's inference precision (``f32`` when unset)."""

OPENVINO_PRECISIONS = ("f32", "bf16", "f16")


def openvino_precision() -> str:
    """The inference precision OpenVINO's CPU plugin is compiled with: ``f32``, the precision of
    the exported graph, unless ``LIBREYOLO_OPENVINO_PRECISION`` asks for another. Left to itself
    the plugin picks by CPU feature (bf16 on CPUs with AVX512-BF16 or AMX), and outputs then drift
    silently from ONNX's (0.12 px boxes, 4e-4 scores measured on such a CPU)."""
    value = os.environ.get(OPENVINO_PRECISION_ENV, "f32").strip().lower() or "f32"
    if value not in OPENVINO_PRECISIONS:
        raise ConfigError(f"{OPENVINO_PRECISION_ENV}={value!r} is not an OpenVINO inference precision; use one of "
                          f"{', '.join(OPENVINO_PRECISIONS)} (or leave it unset for f32)")
    return value


class OpenVINONetwork(RuntimeNetwork):
    """An OpenVINO IR folder on the OpenVINO CPU plugin (outputs moved to the model's device),
    computing at ``openvino_precision()`` whatever the CPU."""

    kind = "openvino"

    def __init__(self, folder: Path) -> None:
        ov = require("openvino", "openvino", f"LibreYOLO({str(folder)!r})")
        xml = folder / "model.xml"
        if not xml.is_file():
            raise CheckpointError(f"{folder}: an OpenVINO model folder needs model.xml and {METADATA_FILE}, as "
                                  "model.export(format='openvino') writes them")
        super().__init__(folder, read_folder_metadata(folder))
        self.precision = openvino_precision()
        core = ov.Core()
        capability = {"bf16": "BF16", "f16": "FP16"}.get(self.precision)
        if capability is not None and capability not in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
            # The plugin then ignores the hint and computes in f32: say so rather than let it pass silently.
            log.warning("%s=%s: this CPU has no native %s (OpenVINO reports %s), so the model computes in f32",
                        OPENVINO_PRECISION_ENV, self.precision, self.precision,
                        ", ".join(core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")))
        self._compiled = core.compile_model(str(xml), "CPU", {"INFERENCE_PRECISION_HINT": self.precision,
                                                              "INFERENCE_NUM_THREADS": cpu_threads()})

    @property
    def inference_precision(self) -> str:
        """What the compiled model reports it computes in (``f32`` unless asked otherwise)."""
        return str(self._compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name())

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "inference_precision": self.inference_precision}

    def run(self, images: Tensor) -> list[Tensor]:
        result = self._compiled(numpy_input(images, self.meta.input_dtype))
        return [torch.from_numpy(np.asarray(result[out])) for out in self._compiled.outputs]


FOLDER_BACKENDS.update({"openvino": OpenVINONetwork, "ncnn": NcnnNetwork, "engine": TensorRTNetwork})
