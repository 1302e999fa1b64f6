"""``model.export(...)``: the family's inference seam, traced once, written in the asked format
(``targets.TARGETS`` says what each format is; one writer module per format family).

The exported graph is exactly ``inference_forward`` (the seam inference capture records), so the
family's ``postprocess`` (NMS, thresholds, top-k) runs in Python on the runtime's outputs and an
exported model predicts and validates through the same task code as the PyTorch one.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from ..config import load_config
from ..devices import default_device, describe_device
from ..errors import ConfigError
from ..runtime.metadata import ExportMetadata
from ..version import __version__
from .coreml import write_coreml
from .formats import write_onnx, write_torchscript
from .int8 import calibration_batches, write_onnx_int8
from .ncnn import write_ncnn
from .openvino import write_openvino
from .settings import DEFAULT_OPSET, ExportConfig
from .targets import get_target
from .tensorrt import write_engine
from .tflite import write_tflite
from .writing import WriteJob

if TYPE_CHECKING:
    from ..contract.family import Family
    from ..contract.spec import TaskDecl
    from ..handle import ModelHandle

log = logging.getLogger(__name__)

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


@contextlib.contextmanager
def _unfused_attention() -> Iterator[None]:
    """``nn.MultiheadAttention`` traced as its plain ops: in eval mode without gradients it would
    take torch's fused fast path (``_native_multi_head_attention``), which ONNX cannot express.
    The same arithmetic; the setting is restored afterwards."""
    mha = getattr(torch.backends, "mha", None)
    if mha is None:
        yield
        return
    was = mha.get_fastpath_enabled()
    mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        mha.set_fastpath_enabled(was)


def default_path(model: ModelHandle, fmt: str, int8: bool = False) -> Path:
    stem = model.ckpt_path.with_suffix("") if model.ckpt_path else Path(model.spec.weight_name(model.size, model.task, ""))
    return Path(f"{stem}{'_int8' if int8 else ''}{get_target(fmt).suffix}")


def output_path(file: str | Path, fmt: str) -> Path:
    """``file`` as given, with the format's suffix added when it has none: ``LibreYOLO(path)``
    recognises an exported model by its suffix, so a suffix-less ``file="best"`` would write an
    ONNX file that nothing reads back. A folder format's name is the user's to choose."""
    path, target = Path(file), get_target(fmt)
    if target.folder or path.suffix:
        return path
    log.info("file=%r has no suffix: writing %s (exported models are recognised by their suffix)",
             str(file), path.name + target.suffix)
    return path.with_name(path.name + target.suffix)


def _write_onnx(job: WriteJob) -> Path:
    if job.calibration is not None:
        return write_onnx_int8(job)
    return write_onnx(job.seam, job.example, job.path, job.meta, opset=job.opset, simplify=job.cfg.simplify)


def _write_openvino(job: WriteJob) -> Path:
    return write_openvino(job.seam, job.example, job.path, job.meta, opset=job.opset, simplify=job.cfg.simplify,
                          calibration=job.calibration)


WRITERS: dict[str, Callable[[WriteJob], Path]] = {
    "onnx": _write_onnx,
    "torchscript": lambda job: write_torchscript(job.seam, job.example, job.path, job.meta),
    "openvino": _write_openvino,
    "ncnn": write_ncnn,
    "tflite": write_tflite,
    "coreml": write_coreml,
    "engine": write_engine,
}
"""Format -> writer; what each format is (suffix, extra, shapes it carries) is ``targets.TARGETS``."""


def export_model(model: ModelHandle, options: dict[str, Any]) -> Path:
    """Write ``model`` in ``options['format']``; returns the file (or the folder of a folder format)."""
    cfg = load_config(ExportConfig, options, "export()")
    target = get_target(cfg.format)
    decl = model.spec.task(model.task)
    if not decl.exportable:
        raise ConfigError(f"{model.spec.display_name} ({model.task}) does not export: {decl.export_note}")
    cfg = replace(cfg, opset=checked_opset(cfg, decl, model.spec.display_name))
    imgsz = model.resolve_imgsz(cfg.imgsz)
    dynamic_imgsz = cfg.dynamic and decl.dynamic_imgsz
    if cfg.dynamic and not decl.dynamic_imgsz:
        log.warning("export(dynamic=True): %s keeps a fixed image size of %d (the batch is dynamic): %s. Export "
                    "once per image size you need (imgsz=...)", model.spec.display_name, imgsz,
                    decl.dynamic_imgsz_note)
    if target.batch_one and cfg.batch != 1:
        raise ConfigError(f"export(format={cfg.format!r}, batch={cfg.batch}): its runtime takes one image per call, "
                          "so the file is written for batch=1 (predict and val still take any batch, fed one by one); "
                          "leave batch at 1")
    device = default_device(cfg.device, model.device)
    if target.needs_cuda and device.type != "cuda":
        raise ConfigError(f"export(format={cfg.format!r}) builds a TensorRT engine for the NVIDIA GPU it will run on, "
                          f"but the device is {device}; pass device=0 on a machine with a GPU and the "
                          f"'{target.extra}' extra (pip install 'libreyolo[{target.extra}]')")
    if cfg.int8 and model.quantization is not None:
        raise ConfigError(f"export(int8=True) calibrates the fp32 network, but the model is quantized to "
                          f"{model.quantization.recipe!r}; call model.dequantize() first")
    log.info("export on %s", describe_device(device))
    precision, half = export_precision(model, cfg)
    if half and not target.half_on_cpu and device.type != "cuda":
        why = "half=True" if cfg.half else "the model is quantized to fp16, so this"
        raise ConfigError(f"export(format={cfg.format!r}): {why} traces fp16 weights, which needs a CUDA device "
                          f"(device is {device}); pass device=0, or export fp32 (half=False"
                          f"{'' if cfg.half else ', after model.dequantize()'})")
    net = copy.deepcopy(model.net).to(device).eval()
    for param in net.parameters():
        param.requires_grad_(False)
    half_graph = half and not target.half_on_cpu
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16 if half_graph else torch.float32
    net.to(dtype)  # fp16-on-CPU formats trace fp32 and store fp16 weights themselves; int8 buffers keep their dtype
    seam = ExportSeam(model.family, net).eval()
    generator = torch.Generator().manual_seed(0)
    example = torch.rand(cfg.batch, 3, imgsz, imgsz, generator=generator).to(device=device, dtype=dtype)
    with torch.no_grad():
        traced = seam(example)
    extra: dict[str, Any] = {"traced_on": device.type, "precision": precision,
             "output_shapes": [list(out.shape) for out in traced]}
    if model.keypoints is not None:
        extra["num_keypoints"] = model.keypoints
    calibration = calibration_batches(model, cfg, imgsz) if cfg.int8 else None
    if calibration is not None:
        extra["calibration"] = {"data": cfg.data, "images": sum(len(b) for b in calibration)}
    meta = ExportMetadata(format=cfg.format, family=model.spec.name, size=model.size, task=model.task, nc=model.nc,
                          names=dict(model.names), imgsz=imgsz, batch=cfg.batch, dynamic=cfg.dynamic,
                          dynamic_imgsz=dynamic_imgsz, half=half, input_dtype=str(dtype).removeprefix("torch."),
                          stride=model.stride, mean=model.spec.mean, std=model.spec.std, outputs=len(traced),
                          version=__version__, extra=extra)
    path = output_path(cfg.file, cfg.format) if cfg.file else default_path(model, cfg.format, cfg.int8)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _unfused_attention():
        written = WRITERS[cfg.format](WriteJob(seam, example, path, meta, cfg, calibration))
    shape = ("dynamic batch and image size" if dynamic_imgsz else "dynamic batch") if cfg.dynamic else f"batch {cfg.batch}"
    log.info("exported %s-%s %s to %s (%s, %s, imgsz %d, %s)", model.spec.name, model.size, model.task, written,
             cfg.format, shape, imgsz, precision)
    return written


def checked_opset(cfg: ExportConfig, decl: TaskDecl, name: str) -> int:
    """The opset to write: the user's, or 17 raised to what the family needs; refuses a format or
    an INT8 path the family's declaration leaves out, and an opset below what it needs."""
    if decl.export_formats is not None:
        shown = ", ".join(repr(f) for f in decl.export_formats)
        if cfg.format not in decl.export_formats:
            raise ConfigError(f"export(format={cfg.format!r}): {name} exports to {shown} only: "
                              f"{decl.export_formats_note}")
        if cfg.int8:
            raise ConfigError(f"export(int8=True): INT8 is not checked for {name} (it exports to {shown} only, "
                              f"{decl.export_formats_note}); export fp32, or half=True on a GPU")
    need = decl.min_opset or 11
    if cfg.opset is None:
        return max(DEFAULT_OPSET, need)
    if cfg.opset < need:
        raise ConfigError(f"export(opset={cfg.opset}): {name} needs ONNX opset {need} or later (an operator of its "
                          f"network has no form before it); pass opset={need}, or leave opset unset")
    return cfg.opset


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
    if recipe == "int8" or cfg.int8:
        return "int8", cfg.half
    half = cfg.half or recipe == "fp16"
    return ("fp16" if half else "fp32"), half
