"""``model.export(...)``: the family's inference seam, traced once, written in the asked format.

The exported graph is exactly ``inference_forward`` (the seam inference capture records), so the
family's ``postprocess`` (NMS, thresholds, top-k) runs in Python on the runtime's outputs and an
exported model predicts and validates through the same task code as the PyTorch one.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from ..config import load_config
from ..devices import default_device, describe_device
from ..errors import ConfigError
from ..runtime.metadata import ExportMetadata
from ..version import __version__
from .formats import write_onnx, write_openvino, write_torchscript
from .settings import ExportConfig

if TYPE_CHECKING:
    from ..contract.family import Family
    from ..handle import ModelHandle

log = logging.getLogger(__name__)

SUFFIXES = {"onnx": ".onnx", "torchscript": ".torchscript", "openvino": "_openvino_model"}


class ExportSeam(nn.Module):
    """``family.inference_forward(net, images)`` as a module over a private copy of the network,
    with its outputs flattened to a tuple of tensors (what every format can name)."""

    def __init__(self, family: Family, net: nn.Module) -> None:
        super().__init__()
        self.net = net
        self._family = family

    def forward(self, images: Tensor) -> tuple[Tensor, ...]:
        out = self._family.inference_forward(self.net, images)
        return flatten_outputs(out, self._family.spec.name)


def flatten_outputs(out: Any, family: str) -> tuple[Tensor, ...]:
    """A tensor or a flat sequence of tensors -> a tuple; other trees are not exportable yet."""
    if isinstance(out, Tensor):
        return (out,)
    if isinstance(out, list | tuple) and all(isinstance(t, Tensor) for t in out):
        return tuple(out)
    raise ConfigError(f"{family}: inference_forward returns {type(out).__name__}, but export handles a tensor or "
                      "a flat list of tensors; declare the task exportable=False with a reason, or flatten the seam")


def default_path(model: ModelHandle, fmt: str) -> Path:
    stem = model.ckpt_path.with_suffix("") if model.ckpt_path else Path(model.spec.weight_name(model.size, model.task, ""))
    return Path(f"{stem}{SUFFIXES[fmt]}")


def export_model(model: ModelHandle, options: dict[str, Any]) -> Path:
    """Write ``model`` in ``options['format']``; returns the file (OpenVINO: the folder)."""
    cfg = load_config(ExportConfig, options, "export()")
    decl = model.spec.task(model.task)
    if not decl.exportable:
        raise ConfigError(f"{model.spec.display_name} ({model.task}) does not export: {decl.export_note}")
    imgsz = model.resolve_imgsz(cfg.imgsz)
    dynamic_imgsz = cfg.dynamic and decl.dynamic_imgsz
    if cfg.dynamic and not decl.dynamic_imgsz:
        log.warning("export(dynamic=True): %s keeps a fixed image size of %d (the batch is dynamic): %s. Export "
                    "once per image size you need (imgsz=...)", model.spec.display_name, imgsz,
                    decl.dynamic_imgsz_note)
    device = default_device(cfg.device, model.device)
    log.info("export on %s", describe_device(device))
    precision, half = export_precision(model, cfg)
    if half and cfg.format != "openvino" and device.type != "cuda":
        why = "half=True" if cfg.half else "the model is quantized to fp16, so this"
        raise ConfigError(f"export(format={cfg.format!r}): {why} traces fp16 weights, which needs a CUDA device "
                          f"(device is {device}); pass device=0, or export fp32 (half=False"
                          f"{'' if cfg.half else ', after model.dequantize()'})")
    net = copy.deepcopy(model.net).to(device).eval()
    for param in net.parameters():
        param.requires_grad_(False)
    half_graph = half and cfg.format != "openvino"
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16 if half_graph else torch.float32
    net.to(dtype)  # OpenVINO traces fp32 and compresses to fp16 itself; int8 buffers keep their dtype
    seam = ExportSeam(model.family, net)
    generator = torch.Generator().manual_seed(0)
    example = torch.rand(cfg.batch, 3, imgsz, imgsz, generator=generator).to(device=device, dtype=dtype)
    with torch.no_grad():
        outputs = len(seam(example))
    meta = ExportMetadata(format=cfg.format, family=model.spec.name, size=model.size, task=model.task, nc=model.nc,
                          names=dict(model.names), imgsz=imgsz, batch=cfg.batch, dynamic=cfg.dynamic,
                          dynamic_imgsz=dynamic_imgsz, half=half, input_dtype=str(dtype).removeprefix("torch."),
                          stride=model.spec.stride, mean=model.spec.mean, std=model.spec.std, outputs=outputs,
                          version=__version__, extra={"traced_on": device.type, "precision": precision})
    path = Path(cfg.file) if cfg.file else default_path(model, cfg.format)
    path.parent.mkdir(parents=True, exist_ok=True)
    if cfg.format == "onnx":
        written = write_onnx(seam, example, path, meta, opset=cfg.opset, simplify=cfg.simplify)
    elif cfg.format == "torchscript":
        written = write_torchscript(seam, example, path, meta)
    else:
        written = write_openvino(seam, example, path, meta, opset=cfg.opset, simplify=cfg.simplify)
    shape = ("dynamic batch and image size" if dynamic_imgsz else "dynamic batch") if cfg.dynamic else f"batch {cfg.batch}"
    log.info("exported %s-%s %s to %s (%s, %s, imgsz %d, %s)", model.spec.name, model.size, model.task, written,
             cfg.format, shape, imgsz, precision)
    return written


def export_precision(model: ModelHandle, cfg: ExportConfig) -> tuple[str, bool]:
    """The precision the file carries (``"fp32"``, ``"fp16"``, ``"bf16"``, ``"int8"``: the model's
    ``quantize`` recipe, else fp16 with ``half=True``) and whether its weights are fp16."""
    recipe = model.quantization.recipe if model.quantization is not None else None
    if recipe == "bf16":
        if cfg.half:
            raise ConfigError("export(half=True): the model is quantized to 'bf16'; export it as it is (half=False), "
                              "or model.dequantize() first for an fp16 export")
        if cfg.format != "torchscript":
            raise ConfigError(f"export(format={cfg.format!r}): the model is quantized to 'bf16', which only TorchScript "
                              "carries here (the ONNX and OpenVINO runtimes are fed NumPy arrays, and NumPy has no "
                              "bfloat16); use format='torchscript', or quantize('fp16') for ONNX")
        return "bf16", False
    if recipe == "int8":
        return "int8", cfg.half
    half = cfg.half or recipe == "fp16"
    return ("fp16" if half else "fp32"), half
