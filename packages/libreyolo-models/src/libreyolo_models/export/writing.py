"""What a format's writer is handed: the traced seam, an example input, where to write, the
metadata to embed, the options, and (for ``int8``) the calibration batches."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..runtime.metadata import ExportMetadata
from .settings import ExportConfig


@dataclass
class WriteJob:
    """One export, decided: the writer only converts and embeds ``meta``.

    Attributes:
        seam: the inference seam as a module (``ExportSeam``), eval mode, on the trace device.
        example: an input of the exported shape and dtype, on that device.
        path: the file or folder to write (``Target.folder`` decides which).
        meta: the metadata to embed (``outputs`` already counted).
        cfg: the export options (``opset`` resolved: ``opset`` below is never None).
        calibration: ``int8`` only: float32 ``[batch, 3, S, S]`` arrays in [0, 1], as predict
            feeds the network (letterboxed), one per calibration step.
    """

    seam: nn.Module
    example: torch.Tensor
    path: Path
    meta: ExportMetadata
    cfg: ExportConfig
    calibration: list[np.ndarray] | None = None

    @property
    def opset(self) -> int:
        """The ONNX opset to write (the exporter resolved ``cfg.opset``)."""
        if self.cfg.opset is None:
            raise ValueError("WriteJob: cfg.opset must be resolved by the exporter (checked_opset)")
        return self.cfg.opset
