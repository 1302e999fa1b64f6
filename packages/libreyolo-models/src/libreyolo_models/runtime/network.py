"""The part every runtime backend shares: metadata, the device/dtype anchor, input checks and
fixed-batch chunking (see ``backends`` for the backends and how a file picks one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ..errors import ConfigError
from .metadata import ExportMetadata

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}  # bfloat16: TorchScript only


class RuntimeNetwork(nn.Module):
    """The common part: metadata, device/dtype anchor, input checks and fixed-batch chunking.

    ``anchor`` is an empty fp32 parameter: ``model.device`` / ``model.dtype`` read it, and
    ``model.to(device)`` moves it, which is where the outputs are returned.
    """

    kind = "runtime"

    def __init__(self, path: Path, meta: ExportMetadata) -> None:
        super().__init__()
        self.path, self.meta = path, meta
        self.anchor = nn.Parameter(torch.zeros(0), requires_grad=False)

    @property
    def runs_only_on(self) -> str | None:
        """The device type the file is bound to ("cpu", "cuda"), or None when it runs anywhere."""
        return None

    def forward(self, images: Tensor) -> Tensor | tuple[Tensor, ...]:
        self._check(images)
        step = len(images) if self.meta.dynamic else self.meta.batch
        parts: list[list[Tensor]] = []
        for start in range(0, len(images), step):
            chunk = images[start:start + step]
            n = len(chunk)
            if n < step:
                chunk = torch.cat((chunk, chunk.new_zeros((step - n, *chunk.shape[1:]))))
            parts.append([out[:n] for out in self.run(chunk)])
        outs = [torch.cat(column) if len(parts) > 1 else column[0] for column in zip(*parts)]
        outs = [out.to(self.anchor.device) for out in outs]
        return outs[0] if len(outs) == 1 else tuple(outs)

    @property
    def fixed_imgsz(self) -> int | None:
        """The one square size the file runs at; None when height and width are free."""
        return None if self.meta.dynamic_imgsz else self.meta.imgsz

    def _check(self, images: Tensor) -> None:
        meta = self.meta
        if images.ndim != 4 or images.shape[1] != 3:
            raise ConfigError(f"{self.path}: expects images [B, 3, H, W], got {tuple(images.shape)}")
        h, w = images.shape[-2:]
        if self.fixed_imgsz is None:
            if h % meta.stride or w % meta.stride:
                raise ConfigError(f"{self.path}: got {h}x{w} images, but height and width must be multiples of "
                                  f"{meta.stride} (the network's stride); letterbox to such a size (predict and val "
                                  f"do, at imgsz=)")
        elif (h, w) != (meta.imgsz, meta.imgsz):
            raise ConfigError(f"{self.path} was exported for imgsz={meta.imgsz} but got {h}x{w} images; use "
                              f"imgsz={meta.imgsz}, or re-export from the .pt with imgsz={max(h, w)}")

    def run(self, images: Tensor) -> list[Tensor]:
        """One call of the runtime on exactly the batch it accepts."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {"runtime": self.kind, "file": str(self.path), "exported_batch": self.meta.batch,
                "dynamic": self.meta.dynamic, "dynamic_imgsz": self.meta.dynamic_imgsz, "half": self.meta.half,
                "precision": self.meta.extra.get("precision", "fp16" if self.meta.half else "fp32")}


def cpu_threads() -> int:
    """Threads an exported model's CPU runtime computes on: torch's intra-op count, so one setting
    (``torch.set_num_threads``, ``OMP_NUM_THREADS``) governs every backend, and processes sharing
    a machine (DDP ranks, test workers) do not each start a pool the size of the machine."""
    return max(1, torch.get_num_threads())


def numpy_input(images: Tensor, dtype: str) -> np.ndarray:
    return np.ascontiguousarray(images.detach().to("cpu", DTYPES[dtype]).numpy())
