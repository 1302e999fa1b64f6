"""TensorRT engines (``format="engine"``) on the GPU they were built for: inputs and outputs live
in torch CUDA tensors whose addresses the execution context is given, run on torch's current
stream. Not run on this project's CPU machines (tests marked ``cuda``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..errors import CheckpointError, ConfigError
from ..optional import require
from .mobile import read_folder_metadata
from .network import DTYPES, RuntimeNetwork

ENGINE_FILE = "model.engine"


class TensorRTNetwork(RuntimeNetwork):
    """A TensorRT engine folder; it runs on the CUDA device it is moved to (``model.to(0)``)."""

    kind = "tensorrt"

    def __init__(self, folder: Path) -> None:
        trt = require("tensorrt", "tensorrt", f"LibreYOLO({str(folder)!r})")
        engine_file = folder / ENGINE_FILE
        if not engine_file.is_file():
            raise CheckpointError(f"{folder}: a TensorRT model folder needs {ENGINE_FILE}, as "
                                  "model.export(format='engine') writes it")
        super().__init__(folder, read_folder_metadata(folder))
        if not torch.cuda.is_available():
            raise ConfigError(f"{folder} is a TensorRT engine, which runs on an NVIDIA GPU only and none is visible; "
                              "load it on the machine it was built on, or export format='onnx' for the CPU")
        self._trt = trt
        runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
        self._engine = runtime.deserialize_cuda_engine(engine_file.read_bytes())
        if self._engine is None:
            raise CheckpointError(f"{folder}: TensorRT {trt.__version__} could not load this engine (engines are tied "
                                  "to the GPU model and TensorRT version that built them); re-export it here")
        self._context = self._engine.create_execution_context()
        names = [self._engine.get_tensor_name(i) for i in range(self._engine.num_io_tensors)]
        self._outputs = [n for n in names if self._engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
        self._outputs.sort(key=lambda n: int(n.removeprefix("output")) if n.removeprefix("output").isdigit() else 0)

    @property
    def runs_only_on(self) -> str | None:
        return "cuda"

    def _torch_dtype(self, name: str) -> torch.dtype:
        kind: Any = self._engine.get_tensor_dtype(name)
        table = {self._trt.DataType.FLOAT: torch.float32, self._trt.DataType.HALF: torch.float16,
                 self._trt.DataType.INT32: torch.int32, self._trt.DataType.INT64: torch.int64,
                 self._trt.DataType.BOOL: torch.bool}
        return table[kind]

    def run(self, images: Tensor) -> list[Tensor]:
        device = self.anchor.device
        if device.type != "cuda":
            raise ConfigError(f"{self.path} is a TensorRT engine and runs on a GPU; move the model there with "
                              "model.to(0) (predict and val do when no device is given)")
        with torch.cuda.device(device):
            x = images.to(device, DTYPES[self.meta.input_dtype]).contiguous()
            self._context.set_input_shape("images", tuple(x.shape))
            self._context.set_tensor_address("images", x.data_ptr())
            outs = []
            for name in self._outputs:
                shape = tuple(self._context.get_tensor_shape(name))
                out = torch.empty(shape, dtype=self._torch_dtype(name), device=device)
                self._context.set_tensor_address(name, out.data_ptr())
                outs.append(out)
            if not self._context.execute_async_v3(torch.cuda.current_stream(device).cuda_stream):
                raise ConfigError(f"{self.path}: TensorRT failed to run the engine on {tuple(x.shape)} images")
            torch.cuda.current_stream(device).synchronize()
        return outs
