"""One writer per format. Each takes the traced seam module and an example input and writes the
file(s) with the metadata embedded; the exporter decides everything else."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from ..optional import require
from ..runtime.metadata import METADATA_FILE, METADATA_KEY, ExportMetadata
from .deform_conv_onnx import register_deform_conv

log = logging.getLogger(__name__)


@contextmanager
def quiet_tracing() -> Iterator[None]:
    """Tracing warns about Python values it folds into constants (shapes of a fixed-size export,
    which is intended) and about the legacy exporter's future; neither is the user's to act on."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        warnings.filterwarnings("ignore", message=".*legacy TorchScript-based ONNX export.*")
        yield


def onnx_dynamic_axes(meta: ExportMetadata) -> dict[str, dict[int, str]] | None:
    """The free input axes: batch with ``dynamic``, plus height and width with ``dynamic_imgsz``.
    Outputs declare their batch; the exporter derives their other size-dependent axes (anchor
    count, mask height and width) from the input's."""
    if not meta.dynamic:
        return None
    images = {0: "batch", 2: "height", 3: "width"} if meta.dynamic_imgsz else {0: "batch"}
    return {"images": images, **{f"output{i}": {0: "batch"} for i in range(meta.outputs)}}


def write_onnx_graph(module: nn.Module, example: torch.Tensor, path: Path, meta: ExportMetadata, *,
                     opset: int) -> None:
    """The seam as an ONNX graph (TorchScript-based exporter: it handles every family's ops at
    opset 17 on the torch versions we support, where the torch.export path still rejects some)."""
    names = [f"output{i}" for i in range(meta.outputs)]
    axes = onnx_dynamic_axes(meta)
    register_deform_conv()  # a rule for torchvision's operator (BiRefNet), used only where it appears
    with quiet_tracing():
        torch.onnx.export(module, (example,), str(path), dynamo=False, opset_version=opset,
                          input_names=["images"], output_names=names, dynamic_axes=axes, do_constant_folding=True)


def write_onnx(module: nn.Module, example: torch.Tensor, path: Path, meta: ExportMetadata, *,
               opset: int, simplify: bool) -> Path:
    require("onnx", "onnx", "export(format='onnx')")
    write_onnx_graph(module, example, path, meta, opset=opset)
    if simplify:
        slim_onnx(path, "export(simplify=True)")
    embed_onnx_metadata(path, meta)
    return path


def slim_onnx(path: Path, purpose: str) -> None:
    """Simplify the ONNX file in place (onnxslim: constants folded, shape arithmetic removed)."""
    onnx = require("onnx", "onnx", purpose)
    onnxslim = require("onnxslim", "onnx", purpose)
    onnx.save(onnxslim.slim(onnx.load(str(path))), str(path))


def embed_onnx_metadata(path: Path, meta: ExportMetadata) -> None:
    """Put ``meta`` into the ONNX file's ``metadata_props`` (replacing whatever was there)."""
    onnx = require("onnx", "onnx", "export(format='onnx')")
    proto = onnx.load(str(path))
    del proto.metadata_props[:]
    entry = proto.metadata_props.add()
    entry.key, entry.value = METADATA_KEY, meta.to_json()
    onnx.save(proto, str(path))


def write_torchscript(module: nn.Module, example: torch.Tensor, path: Path, meta: ExportMetadata) -> Path:
    with quiet_tracing(), torch.no_grad():
        traced = torch.jit.trace(module, (example,), check_trace=False)
        torch.jit.save(traced, str(path), _extra_files={METADATA_FILE: meta.to_json()})
    return path
