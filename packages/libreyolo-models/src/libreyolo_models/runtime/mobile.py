"""Backends for the mobile formats: NCNN (its Python binding), TFLite (LiteRT's interpreter) and
CoreML (macOS only). Each is written for one batch and image size (``ExportMetadata.batch`` /
``imgsz``); ``RuntimeNetwork`` feeds other batches in chunks of it.

Outputs are shaped back to what the PyTorch seam returned, recorded at export in
``meta.extra["output_shapes"]``: NCNN drops the batch axis, and TFLite lays 4-D outputs out as
NHWC.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..errors import CheckpointError, ConfigError
from ..optional import require
from .coreml_tools import import_coremltools
from .metadata import METADATA_FILE, METADATA_KEY, ExportMetadata
from .network import RuntimeNetwork, cpu_threads, numpy_input


def read_folder_metadata(folder: Path) -> ExportMetadata:
    """``libreyolo.json`` of an export folder; ``CheckpointError`` naming it when absent."""
    meta_file = folder / METADATA_FILE
    if not meta_file.is_file():
        raise CheckpointError(f"{folder}: an exported model folder needs {METADATA_FILE}, as model.export writes it")
    return ExportMetadata.from_json(meta_file.read_text(), str(meta_file))


def output_shapes(meta: ExportMetadata, source: Path) -> list[tuple[int, ...]]:
    shapes = meta.extra.get("output_shapes")
    if not isinstance(shapes, list) or len(shapes) != meta.outputs:
        raise CheckpointError(f"{source}: its metadata lacks the output shapes this runtime needs; re-export the "
                              "model with this version")
    return [tuple(int(d) for d in shape) for shape in shapes]


def restore_layout(out: np.ndarray, shape: tuple[int, ...], source: Path, *, flat: bool = False) -> Tensor:
    """``out`` as the exported ``shape``: as it is; NHWC of an NCHW shape (TFLite); or, with
    ``flat``, any array of as many elements in the same order (NCNN drops unit axes)."""
    array = np.asarray(out)
    if array.shape == shape or (flat and array.size == int(np.prod(shape))):
        return torch.from_numpy(np.ascontiguousarray(array).reshape(shape).copy())
    if len(shape) == 4 and array.shape == (shape[0], shape[2], shape[3], shape[1]):
        return torch.from_numpy(np.ascontiguousarray(array.transpose(0, 3, 1, 2)))
    raise ConfigError(f"{source}: the runtime returned an output of shape {array.shape}, but the model was exported "
                      f"with {shape}; re-export it")


class NcnnNetwork(RuntimeNetwork):
    """An NCNN folder (``model.ncnn.param`` / ``.bin``) on ncnn's CPU path, in fp32 arithmetic (ncnn
    would otherwise pick fp16 storage and arithmetic on CPUs that have them, and outputs drift)."""

    kind = "ncnn"

    def __init__(self, folder: Path) -> None:
        ncnn = require("ncnn", "ncnn", f"LibreYOLO({str(folder)!r})")
        param, weights = folder / "model.ncnn.param", folder / "model.ncnn.bin"
        if not param.is_file() or not weights.is_file():
            raise CheckpointError(f"{folder}: an NCNN model folder needs model.ncnn.param and model.ncnn.bin, as "
                                  "model.export(format='ncnn') writes them")
        super().__init__(folder, read_folder_metadata(folder))
        self._shapes = output_shapes(self.meta, folder)
        net = ncnn.Net()
        for flag in ("use_fp16_packed", "use_fp16_storage", "use_fp16_arithmetic", "use_bf16_storage"):
            setattr(net.opt, flag, False)
        net.opt.num_threads = cpu_threads()
        if net.load_param(str(param)) != 0 or net.load_model(str(weights)) != 0:
            raise CheckpointError(f"{folder}: ncnn could not read the model files; re-export the model")
        self._ncnn, self._net = ncnn, net

    def run(self, images: Tensor) -> list[Tensor]:
        outs: list[list[Tensor]] = [[] for _ in self._shapes]
        for image in numpy_input(images, "float32"):  # ncnn's tensors have no batch axis: one image per call
            extractor = self._net.create_extractor()
            extractor.input("in0", self._ncnn.Mat(np.ascontiguousarray(image)))
            for i, shape in enumerate(self._shapes):
                status, mat = extractor.extract(f"out{i}")
                if status != 0:
                    raise ConfigError(f"{self.path}: ncnn failed on output out{i} (status {status}); re-export the model")
                outs[i].append(restore_layout(np.array(mat), (1, *shape[1:]), self.path, flat=True))
        return [torch.cat(column) for column in outs]


def read_tflite_metadata(path: Path) -> ExportMetadata:
    """The ``libreyolo.json`` zipped onto the end of a TFLite file by ``export.tflite``."""
    try:
        with zipfile.ZipFile(path) as archive:
            text = archive.read(METADATA_FILE).decode()
    except (zipfile.BadZipFile, KeyError):
        raise CheckpointError(f"{path}: a TFLite file without LibreYOLO metadata; only files written by "
                              "model.export(format='tflite') load as models") from None
    return ExportMetadata.from_json(text, str(path))


class TFLiteNetwork(RuntimeNetwork):
    """A ``.tflite`` file on LiteRT's interpreter (XNNPACK on the CPU); NHWC input, fed here."""

    kind = "tflite"

    def __init__(self, path: Path) -> None:
        interpreter_module = require("ai_edge_litert.interpreter", "tflite", f"LibreYOLO({str(path)!r})")
        super().__init__(path, read_tflite_metadata(path))
        self._shapes = output_shapes(self.meta, path)
        self._interpreter = interpreter_module.Interpreter(model_path=str(path),
                                                           num_threads=cpu_threads())
        self._interpreter.allocate_tensors()
        self._input = self._interpreter.get_input_details()[0]["index"]
        self._outputs = self._match_outputs(self._interpreter.get_output_details())

    def _match_outputs(self, details: list[dict[str, Any]]) -> list[int]:
        """The interpreter's output index for each seam output: by name (``output<i>``) where
        onnx2tf kept the names, else by shape (as is, or NHWC of the NCHW shape)."""
        by_name = {d["name"]: d["index"] for d in details}
        if all(f"output{i}" in by_name for i in range(len(self._shapes))):
            return [by_name[f"output{i}"] for i in range(len(self._shapes))]
        free, order = list(details), []
        for shape in self._shapes:
            nhwc = (shape[0], shape[2], shape[3], shape[1]) if len(shape) == 4 else shape
            match = next((d for d in free if tuple(d["shape"]) in (shape, nhwc)), None)
            if match is None:
                raise CheckpointError(f"{self.path}: no interpreter output has the exported shape {shape}; re-export")
            free.remove(match)
            order.append(match["index"])
        return order

    def run(self, images: Tensor) -> list[Tensor]:
        batch = numpy_input(images, "float32").transpose(0, 2, 3, 1)  # NCHW -> NHWC
        self._interpreter.set_tensor(self._input, np.ascontiguousarray(batch))
        self._interpreter.invoke()
        return [restore_layout(self._interpreter.get_tensor(index), shape, self.path)
                for index, shape in zip(self._outputs, self._shapes, strict=True)]


class CoreMLNetwork(RuntimeNetwork):
    """A ``.mlpackage`` through coremltools' ``predict``, which exists on macOS only."""

    kind = "coreml"

    def __init__(self, path: Path) -> None:
        if sys.platform != "darwin":
            raise ConfigError(f"{path} is a CoreML model, and Core ML runs models on macOS only (coremltools converts "
                              f"but cannot predict on {sys.platform}); load it on a Mac, or export format='onnx', "
                              "'openvino', 'tflite' or 'ncnn' to run it here")
        ct = import_coremltools(f"LibreYOLO({str(path)!r})")
        model = ct.models.MLModel(str(path))
        text = model.user_defined_metadata.get(METADATA_KEY)
        if not text:
            raise CheckpointError(f"{path}: a CoreML model without LibreYOLO metadata; only files written by "
                                  "model.export(format='coreml') load as models")
        super().__init__(path, ExportMetadata.from_json(text, str(path)))
        self._model: Any = model

    def run(self, images: Tensor) -> list[Tensor]:
        out = self._model.predict({"images": numpy_input(images, "float32")})
        return [torch.from_numpy(np.asarray(out[f"output{i}"], dtype=np.float32)) for i in range(self.meta.outputs)]
