"""Runtime backends behind the inference seam.

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
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ..errors import CheckpointError, ConfigError
from ..optional import require
from .metadata import METADATA_FILE, METADATA_KEY, ExportMetadata

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}  # bfloat16: TorchScript only


def is_exported(model: object) -> bool:
    """Whether ``model`` names an exported model: ``.onnx``, ``.torchscript`` or an OpenVINO folder."""
    if not isinstance(model, str | Path):
        return False
    path = Path(model)
    if path.suffix.lower() in (".onnx", ".torchscript"):
        return True
    return path.is_dir() and (path / METADATA_FILE).is_file()


def load_exported(model: str | Path) -> RuntimeNetwork:
    """The backend for ``model``, chosen from the file; ``FileNotFoundError`` / ``CheckpointError``
    naming it when it is missing or was not written by ``model.export``."""
    path = Path(model)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such exported model (export one with model.export(format=...))")
    if path.is_dir():
        return OpenVINONetwork(path)
    if path.suffix.lower() == ".onnx":
        return OnnxNetwork(path)
    return TorchScriptNetwork(path)


class RuntimeNetwork(nn.Module):
    """The common part: metadata, device/dtype anchor, input checks and fixed-batch chunking.

    ``anchor`` is an empty fp32 parameter: ``model.device`` / ``model.dtype`` read it, and
    ``model.to(device)`` moves it, which is where the outputs are returned.
    """

    kind = "runtime"

    def __init__(self, path: Path, meta: ExportMetadata) -> None:
        super().__init__()
        self.path, self.meta = path, meta
        self.anchor = nn.Parameter(torch.zeros(0), requires_grad=False)

    @property
    def runs_only_on(self) -> str | None:
        """The device type the file is bound to ("cpu", "cuda"), or None when it runs anywhere."""
        return None

    def forward(self, images: Tensor) -> Tensor | tuple[Tensor, ...]:
        self._check(images)
        step = len(images) if self.meta.dynamic else self.meta.batch
        parts: list[list[Tensor]] = []
        for start in range(0, len(images), step):
            chunk = images[start:start + step]
            n = len(chunk)
            if n < step:
                chunk = torch.cat((chunk, chunk.new_zeros((step - n, *chunk.shape[1:]))))
            parts.append([out[:n] for out in self.run(chunk)])
        outs = [torch.cat(column) if len(parts) > 1 else column[0] for column in zip(*parts)]
        outs = [out.to(self.anchor.device) for out in outs]
        return outs[0] if len(outs) == 1 else tuple(outs)

    @property
    def fixed_imgsz(self) -> int | None:
        """The one square size the file runs at; None when height and width are free."""
        return None if self.meta.dynamic_imgsz else self.meta.imgsz

    def _check(self, images: Tensor) -> None:
        meta = self.meta
        if images.ndim != 4 or images.shape[1] != 3:
            raise ConfigError(f"{self.path}: expects images [B, 3, H, W], got {tuple(images.shape)}")
        h, w = images.shape[-2:]
        if self.fixed_imgsz is None:
            if h % meta.stride or w % meta.stride:
                raise ConfigError(f"{self.path}: got {h}x{w} images, but height and width must be multiples of "
                                  f"{meta.stride} (the network's stride); letterbox to such a size (predict and val "
                                  f"do, at imgsz=)")
        elif (h, w) != (meta.imgsz, meta.imgsz):
            raise ConfigError(f"{self.path} was exported for imgsz={meta.imgsz} but got {h}x{w} images; use "
                              f"imgsz={meta.imgsz}, or re-export from the .pt with imgsz={max(h, w)}")

    def run(self, images: Tensor) -> list[Tensor]:
        """One call of the runtime on exactly the batch it accepts."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {"runtime": self.kind, "file": str(self.path), "exported_batch": self.meta.batch,
                "dynamic": self.meta.dynamic, "dynamic_imgsz": self.meta.dynamic_imgsz, "half": self.meta.half,
                "precision": self.meta.extra.get("precision", "fp16" if self.meta.half else "fp32")}


def _numpy_input(images: Tensor, dtype: str) -> np.ndarray:
    return np.ascontiguousarray(images.detach().to("cpu", DTYPES[dtype]).numpy())


class OnnxNetwork(RuntimeNetwork):
    """onnxruntime; the CUDA execution provider when the model is on a GPU and onnxruntime has it."""

    kind = "onnxruntime"

    def __init__(self, path: Path) -> None:
        onnx_rt = require("onnxruntime", "onnx", f"LibreYOLO({str(path)!r})")
        self._ort = onnx_rt
        options = onnx_rt.SessionOptions()
        options.log_severity_level = 3
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
        feed = {session.get_inputs()[0].name: _numpy_input(images, self.meta.input_dtype)}
        return [torch.from_numpy(np.asarray(out)) for out in session.run(None, feed)]


class TorchScriptNetwork(RuntimeNetwork):
    """A traced TorchScript module (``torch.jit.load``); it moves with ``model.to(device)``."""

    kind = "torchscript"

    def __init__(self, path: Path) -> None:
        files = {METADATA_FILE: ""}
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
        meta_file, xml = folder / METADATA_FILE, folder / "model.xml"
        if not meta_file.is_file() or not xml.is_file():
            raise CheckpointError(f"{folder}: an OpenVINO model folder needs model.xml and {METADATA_FILE}, as "
                                  "model.export(format='openvino') writes them")
        super().__init__(folder, ExportMetadata.from_json(meta_file.read_text(), str(meta_file)))
        self.precision = openvino_precision()
        core = ov.Core()
        capability = {"bf16": "BF16", "f16": "FP16"}.get(self.precision)
        if capability is not None and capability not in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
            # The plugin then ignores the hint and computes in f32: say so rather than let it pass silently.
            log.warning("%s=%s: this CPU has no native %s (OpenVINO reports %s), so the model computes in f32",
                        OPENVINO_PRECISION_ENV, self.precision, self.precision,
                        ", ".join(core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")))
        self._compiled = core.compile_model(str(xml), "CPU", {"INFERENCE_PRECISION_HINT": self.precision})

    @property
    def inference_precision(self) -> str:
        """What the compiled model reports it computes in (``f32`` unless asked otherwise)."""
        return str(self._compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name())

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "inference_precision": self.inference_precision}

    def run(self, images: Tensor) -> list[Tensor]:
        result = self._compiled(_numpy_input(images, self.meta.input_dtype))
        return [torch.from_numpy(np.asarray(result[out])) for out in self._compiled.outputs]
