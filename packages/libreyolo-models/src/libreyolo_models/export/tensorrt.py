"""TensorRT engine export (``format="engine"``, extra ``tensorrt``): the seam's ONNX graph parsed
and built by TensorRT on the GPU it will run on, written as ``model.engine`` in a folder with
``libreyolo.json``. An engine is specific to the GPU model and the TensorRT version that built it.

The network is created strongly typed: the precision is the ONNX graph's own (fp32, or fp16 with
``half=True``, traced on the GPU), not chosen per layer by the builder; the builder precision
flags are deprecated in TensorRT 10 and later. ``dynamic=True`` builds one optimisation profile
spanning batch 1 to 2x the exported batch (at least 16) and, where the family allows, image sizes
from two strides to 2x ``imgsz``; the engine is tuned for the exported shape.

Not run on this project's CPU machines: the ``cuda``-marked test exercises it on a GPU host.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..optional import require
from ..runtime.metadata import METADATA_FILE
from .formats import write_onnx_graph
from .writing import WriteJob

log = logging.getLogger(__name__)

ENGINE_FILE = "model.engine"


def _profile_shapes(job: WriteJob) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(min, opt, max) input shapes of the dynamic profile."""
    b, c, h, w = job.example.shape
    top = max(16, 2 * b)
    if job.meta.dynamic_imgsz:
        low = min(h, w, 2 * job.meta.stride)
        return (1, c, low, low), (b, c, h, w), (top, c, 2 * h, 2 * w)
    return (1, c, h, w), (b, c, h, w), (top, c, h, w)


def build_engine(trt: Any, onnx_path: Path, job: WriteJob) -> bytes:
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise ConfigError(f"export(format='engine'): TensorRT could not parse the {job.meta.family} graph: {errors}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(job.cfg.workspace * 2**30))
    if job.meta.dynamic:
        profile = builder.create_optimization_profile()
        profile.set_shape("images", *_profile_shapes(job))
        config.add_optimization_profile(profile)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise ConfigError("export(format='engine'): TensorRT's builder returned no engine (see its log above); try a "
                          "larger workspace=, or export format='onnx'")
    return bytes(serialized)


def write_engine(job: WriteJob) -> Path:
    trt = require("tensorrt", "tensorrt", "export(format='engine')")
    folder = job.path
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = Path(tmp) / "model.onnx"
        write_onnx_graph(job.seam, job.example, onnx_path, job.meta, opset=job.opset)
        engine = build_engine(trt, onnx_path, job)
    (folder / ENGINE_FILE).write_bytes(engine)
    (folder / METADATA_FILE).write_text(job.meta.to_json() + "\n")
    log.info("TensorRT %s engine: %.1f MiB", trt.__version__, len(engine) / 2**20)
    return folder
