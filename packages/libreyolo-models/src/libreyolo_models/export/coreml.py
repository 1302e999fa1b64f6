"""CoreML export (extra ``coreml``): the traced seam converted by coremltools to an ML program
(``.mlpackage``), inputs ``images`` and outputs ``output0..``, our metadata under the model's
user-defined key ``libreyolo``.

coremltools converts on Linux but runs models on macOS only, so here the export is checked by
its spec (inputs, outputs, metadata), not by running it. Two workarounds for coremltools 9.0,
each with its removal condition:

- It imports TensorFlow when it is installed (the ``tflite`` extra brings it), and on Linux
  that import aborts the process (``LLVM ERROR: ... registered more than once``). TensorFlow is
  hidden from coremltools while it is imported and while it converts
  (``runtime.coreml_tools``). Drop when coremltools imports cleanly beside TensorFlow.
- Its ``aten::Int`` converter calls ``int()`` on a one-element array, which NumPy >= 2.4 refuses
  (the trace casts the feature-map sizes that anchor grids are built from). The converter is
  wrapped to take the element. Drop when a coremltools release handles it.
"""

from __future__ import annotations

import logging
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import ConfigError
from ..runtime.coreml_tools import coremltools_quiet, import_coremltools, tensorflow_hidden
from ..runtime.metadata import METADATA_KEY
from .formats import quiet_tracing
from .writing import WriteJob

log = logging.getLogger(__name__)


def _patch_int_cast() -> None:
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.frontend.torch import register_torch_op
    from coremltools.converters.mil.frontend.torch.torch_op_registry import _TORCH_OPS_REGISTRY

    original = _TORCH_OPS_REGISTRY.name_to_func_mapping["int"]
    if getattr(original, "libreyolo_patched", False):
        return

    def int_cast(context: Any, node: Any) -> None:
        value = context[node.inputs[0]]
        if value.can_be_folded_to_const() and np.ndim(value.val) > 0 and np.size(value.val) == 1:
            context.add(mb.const(val=int(np.asarray(value.val).reshape(-1)[0]), name=node.name))
            return
        original(context, node)

    int_cast.__name__ = "int"
    int_cast.libreyolo_patched = True  # type: ignore[attr-defined]
    register_torch_op(int_cast, override=True)


def write_coreml(job: WriteJob) -> Path:
    purpose = "export(format='coreml')"
    ct = import_coremltools(purpose)
    with tensorflow_hidden():
        _patch_int_cast()
    names = [f"output{i}" for i in range(job.meta.outputs)]
    with quiet_tracing(), torch.no_grad():
        traced = torch.jit.trace(job.seam, (job.example,), check_trace=False)
    precision = ct.precision.FLOAT16 if job.meta.half else ct.precision.FLOAT32
    try:
        with tensorflow_hidden(), coremltools_quiet():
            mlmodel = ct.convert(traced, inputs=[ct.TensorType(name="images", shape=tuple(job.example.shape))],
                                 outputs=[ct.TensorType(name=name) for name in names], convert_to="mlprogram",
                                 minimum_deployment_target=ct.target.macOS13, compute_precision=precision)
    except (AssertionError, ValueError, NotImplementedError, RuntimeError, TypeError) as err:
        # coremltools reports an operator it cannot map with a bare assertion or a ValueError.
        raise ConfigError(f"{purpose}: coremltools could not convert the {job.meta.family} network "
                          f"({type(err).__name__}: {str(err).strip() or 'an operator it cannot map'}; its log "
                          "line above names the operator); export format='onnx' or 'openvino' instead") from err
    mlmodel.short_description = (f"LibreYOLO {job.meta.family}-{job.meta.size} {job.meta.task}, "
                                 f"{job.meta.nc} classes, {job.meta.imgsz} px")
    mlmodel.user_defined_metadata[METADATA_KEY] = job.meta.to_json()
    mlmodel.save(str(job.path))
    _remove_temporary_package(mlmodel)
    log.info("CoreML model written; it runs on macOS (coremltools cannot run it on %s)", sys.platform)
    return job.path


def _remove_temporary_package(mlmodel: Any) -> None:
    """coremltools keeps a converted program in a temporary ``.mlpackage`` and removes it only at
    interpreter exit, which a killed or forked worker never reaches; it is copied by now."""
    package = getattr(mlmodel, "package_path", None)
    if getattr(mlmodel, "is_temp_package", False) and package:
        shutil.rmtree(package, ignore_errors=True)
