"""NCNN export through pnnx (extra ``ncnn``): the seam is traced to TorchScript here, and pnnx's
converter binary (shipped in its wheel, no compiler needed) turns the trace into an NCNN
``model.ncnn.param`` / ``model.ncnn.bin`` pair, written into a folder with ``libreyolo.json``.

NCNN runs one image per call (its tensors have no batch axis) at the traced image size, so the
export is batch 1 and fixed-size; the backend (``runtime.mobile.NcnnNetwork``) feeds larger
batches image by image. Weights are stored in fp32 unless ``half=True`` (pnnx's ``fp16``).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from ..errors import ConfigError
from ..optional import require
from ..runtime.metadata import METADATA_FILE
from .formats import quiet_tracing
from .writing import WriteJob

PARAM_FILE, BIN_FILE = "model.ncnn.param", "model.ncnn.bin"
CONVERT_TIMEOUT_S = 1800


def write_ncnn(job: WriteJob) -> Path:
    pnnx = require("pnnx", "ncnn", "export(format='ncnn')")
    folder = job.path
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        trace = tmp / "model.pt"
        with quiet_tracing(), torch.no_grad():
            torch.jit.trace(job.seam, (job.example,), check_trace=False).save(str(trace))
        shape = ",".join(str(d) for d in job.example.shape)
        side = {key: str(tmp / name) for key, name in (("pnnxparam", "m.pnnx.param"), ("pnnxbin", "m.pnnx.bin"),
                                                       ("pnnxpy", "m_pnnx.py"), ("pnnxonnx", "m.pnnx.onnx"),
                                                       ("ncnnpy", "m_ncnn.py"))}
        command = [pnnx.EXEC_PATH, str(trace), f"inputshape=[{shape}]f32", "device=cpu",
                   f"ncnnparam={tmp / PARAM_FILE}", f"ncnnbin={tmp / BIN_FILE}", f"fp16={1 if job.meta.half else 0}",
                   *(f"{key}={value}" for key, value in side.items())]
        run = subprocess.run(command, cwd=tmp, capture_output=True, text=True, timeout=CONVERT_TIMEOUT_S, check=False)
        if run.returncode != 0 or not (tmp / PARAM_FILE).is_file() or not (tmp / BIN_FILE).is_file():
            tail = "\n".join((run.stderr or run.stdout).strip().splitlines()[-8:])
            raise ConfigError(f"export(format='ncnn'): pnnx could not convert the {job.meta.family} seam (exit "
                              f"{run.returncode}); its last words:\n{tail}\nexport format='onnx' or 'openvino' instead, "
                              "or report the operator pnnx names")
        refuse_unconverted(tmp / PARAM_FILE, job.meta.family)
        folder.mkdir(parents=True, exist_ok=True)  # only now: a refused export leaves nothing behind
        for name in (PARAM_FILE, BIN_FILE):
            shutil.move(str(tmp / name), str(folder / name))
    (folder / METADATA_FILE).write_text(job.meta.to_json() + "\n")
    return folder


def unconverted_ops(param: Path) -> list[str]:
    """Operators pnnx wrote into ``param`` under their PyTorch names (``torch.topk``,
    ``Tensor.reshape``): it found no NCNN layer for them, and NCNN refuses to load such a file."""
    lines = param.read_text().splitlines()[2:]  # the magic number, then the layer and blob counts
    return sorted({line.split()[0] for line in lines if line.split() and "." in line.split()[0]})


def refuse_unconverted(param: Path, family: str) -> None:
    """Fail the export, naming the operators, rather than write files that only fail to load."""
    ops = unconverted_ops(param)
    if ops:
        raise ConfigError(f"export(format='ncnn'): NCNN has no layer for {', '.join(ops)} in the {family} "
                          "network (pnnx left them unconverted), so the exported files would not load; "
                          "export format='onnx', 'openvino' or 'torchscript' for this family instead")
