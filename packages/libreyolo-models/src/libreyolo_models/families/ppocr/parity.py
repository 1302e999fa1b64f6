"""Our PP-OCR networks against onnxruntime on the same inputs (the converter's check and the tests')."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor, nn

from ...optional import require
from .nn import to_paddle_input


def run_onnx(path: str | Path, rgb: Tensor) -> Tensor:
    """The ONNX model on ``rgb`` ([0, 1], our input convention), fed as Paddle expects it."""
    ort = require("onnxruntime", "onnx", "comparing PP-OCR with its ONNX files")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return torch.from_numpy(session.run(None, {"x": to_paddle_input(rgb).numpy()})[0])


def compare_with_onnxruntime(net: nn.Module, det: str | Path, rec: str | Path, angle: str | Path,
                             seed: int = 0) -> dict[str, float]:
    """Largest absolute differences of the probability map, the recogniser's and the angle
    classifier's probabilities, on random pictures of two sizes and random lines."""
    g = torch.Generator().manual_seed(seed)
    out: dict[str, float] = {}
    was_training = net.training
    net.eval()
    with torch.no_grad():
        for h, w in ((96, 160), (128, 64)):
            x = torch.rand(1, 3, h, w, generator=g)
            out[f"det {h}x{w}"] = float((net(x) - run_onnx(det, x)[:, 0]).abs().max())
        line = torch.rand(2, 3, 48, 320, generator=g)
        out["rec 48x320"] = float((net.recognize(line) - run_onnx(rec, line)).abs().max())  # type: ignore[operator]
        line = torch.rand(2, 3, 48, 192, generator=g)
        out["angle 48x192"] = float((net.classify_angle(line) - run_onnx(angle, line)).abs().max())  # type: ignore[operator]
    net.train(was_training)
    return out
