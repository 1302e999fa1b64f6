"""What each export format is, as data: where it is written, which extra installs it, what it can
carry (dynamic shapes, fp16 on the CPU, INT8) and where it runs. The exporter and the benchmark
read this table; nothing else branches on a format's name for these facts."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError


@dataclass(frozen=True)
class Target:
    """One export format.

    Attributes:
        name: the ``format=`` value.
        suffix: appended to the output stem: a file suffix, or a folder's (``_openvino_model``).
        folder: the export is a folder holding the model and ``libreyolo.json``.
        extra: the optional extra that installs its converter and runtime ("" for torch only).
        dynamic: can free the batch (and, where the family allows, the image size); the others
            are written at one batch and image size, and ``dynamic=True`` is refused for them.
        half_on_cpu: its writer stores fp16 weights itself from an fp32 trace, so ``half=True``
            needs no GPU (the others trace in fp16, which needs CUDA).
        int8: post-training INT8 quantisation with calibration images (``int8=True``).
        batch_one: the runtime takes one image per call (NCNN): the file is written for batch 1.
        needs_cuda: built on, and bound to, an NVIDIA GPU (TensorRT).
        runs_here: a Linux runtime loads it back as a model (CoreML runs on macOS only).
    """

    name: str
    suffix: str
    folder: bool = False
    extra: str = ""
    dynamic: bool = False
    half_on_cpu: bool = False
    int8: bool = False
    batch_one: bool = False
    needs_cuda: bool = False
    runs_here: bool = True


TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("onnx", ".onnx", extra="onnx", dynamic=True, int8=True),
    Target("torchscript", ".torchscript", dynamic=True),
    Target("openvino", "_openvino_model", folder=True, extra="openvino", dynamic=True, half_on_cpu=True, int8=True),
    Target("ncnn", "_ncnn_model", folder=True, extra="ncnn", half_on_cpu=True, batch_one=True),
    Target("tflite", ".tflite", extra="tflite", half_on_cpu=True),
    Target("coreml", ".mlpackage", extra="coreml", half_on_cpu=True, runs_here=False),
    Target("engine", "_engine_model", folder=True, extra="tensorrt", dynamic=True, needs_cuda=True),
)}


def get_target(fmt: str) -> Target:
    """The table row of ``fmt`` (already checked by ``ExportConfig``)."""
    if fmt not in TARGETS:
        raise ConfigError(f"format={fmt!r} is not an export format; use one of {', '.join(TARGETS)}")
    return TARGETS[fmt]
