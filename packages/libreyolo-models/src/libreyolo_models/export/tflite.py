"""TFLite export (extra ``tflite``): the seam's ONNX graph, simplified, converted by onnx2tf
through TensorFlow, run back by LiteRT's interpreter (``ai-edge-litert``).

Why not a PyTorch-to-TFLite converter: Google's ``litert-torch`` (formerly ``ai-edge-torch``)
pins ``torch<2.15`` in every release up to 0.10.0 (2026-10), so it cannot share an environment
with this workspace's torch; its deprecated predecessor resolves only to a 2024 release. onnx2tf
converts the graph this package already exports and tests, with TensorFlow as its only heavy
dependency (about 1.3 GB installed).

The file is a plain ``.tflite`` flatbuffer with a zip archive appended holding ``libreyolo.json``
(the interpreter reads the flatbuffer and ignores trailing bytes; ``zipfile`` finds the archive
from the end). Inputs are NHWC, as TFLite wants: the backend transposes. One batch and image
size per file; ``half=True`` stores fp16 weights (computed in fp32 by the CPU interpreter).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from ..errors import ConfigError
from ..optional import preload_triton, require
from ..runtime.metadata import METADATA_FILE
from .formats import slim_onnx, write_onnx_graph
from .writing import WriteJob

# onnx2tf compares ONNX and TF outputs on sample images it downloads unless this file is in the
# working folder; we write it (random pixels: the check is numerical, not semantic), so no
# network is needed.
ONNX2TF_SAMPLE = "calibration_image_sample_data_20x128x128x3_float32.npy"


def write_tflite(job: WriteJob) -> Path:
    purpose = "export(format='tflite')"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # TensorFlow's C++ start-up banner is not the user's
    preload_triton()
    onnx2tf = require("onnx2tf", "tflite", purpose)
    require("onnxslim", "tflite", purpose)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        onnx_path = tmp / "model.onnx"
        write_onnx_graph(job.seam, job.example, onnx_path, job.meta, opset=job.opset)
        slim_onnx(onnx_path, purpose)  # folds the anchor grids: onnx2tf fails on their Expand otherwise
        np.save(tmp / ONNX2TF_SAMPLE, np.random.default_rng(0).random((20, 128, 128, 3), dtype=np.float32))
        out = tmp / "tf"
        try:
            with contextlib.chdir(tmp):
                onnx2tf.convert(input_onnx_file_path=str(onnx_path), output_folder_path=str(out), non_verbose=True,
                                copy_onnx_input_output_names_to_tflite=True, disable_group_convolution=True)
        except Exception as err:  # onnx2tf raises bare Exceptions and ValueErrors from deep inside TensorFlow
            raise ConfigError(f"{purpose}: onnx2tf could not convert the {job.meta.family} graph ({type(err).__name__}: "
                              f"{str(err).splitlines()[0] if str(err) else ''}); export format='onnx' or "
                              "'openvino' instead") from err
        made = out / f"model_{'float16' if job.meta.half else 'float32'}.tflite"
        if not made.is_file():
            raise ConfigError(f"{purpose}: onnx2tf finished without writing {made.name}; export format='onnx' or "
                              "'openvino' instead")
        shutil.copyfile(made, job.path)
    with zipfile.ZipFile(job.path, "a") as archive:
        archive.writestr(METADATA_FILE, job.meta.to_json())
    return job.path
