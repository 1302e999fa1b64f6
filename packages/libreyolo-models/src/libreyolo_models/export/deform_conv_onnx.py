"""torchvision's ``deform_conv2d`` as ONNX's ``DeformConv`` (opset 19), for the TorchScript-based
exporter, which has no rule for torchvision's operator and stops at it.

The mapping is one to one: ``DeformConv(X, W, offset, B, mask)`` with torchvision's offset layout
(``[B, 2 * offset_groups * kh * kw, H', W']``, (y, x) pairs per kernel tap) and modulation mask,
which onnxruntime computes the same way (checked per family against PyTorch in the export tests).
OpenVINO's ONNX reader has no rule for ``DeformConv``; a family using it declares which formats
it exports (``TaskDecl.export_formats``).
"""

from __future__ import annotations

from typing import Any

import torch

DEFORM_CONV_OPSET = 19
"""The first ONNX opset with ``DeformConv``."""

_registered = False


def _deform_conv2d(g: Any, x: Any, weight: Any, offset: Any, mask: Any, bias: Any, stride_h: Any, stride_w: Any,
                   pad_h: Any, pad_w: Any, dil_h: Any, dil_w: Any, weight_groups: Any, offset_groups: Any,
                   use_mask: Any) -> Any:
    from torch.onnx import symbolic_helper as helper

    def const(value: Any, kind: str = "i") -> Any:
        return helper._get_const(value, kind, "deform_conv2d")

    sizes = weight.type().sizes()
    if sizes is None:
        raise RuntimeError("deform_conv2d: the weight's shape is unknown to the exporter")
    inputs = [x, weight, offset, bias] + ([mask] if const(use_mask, "b") else [])
    return g.op("DeformConv", *inputs, kernel_shape_i=list(sizes[2:]), strides_i=[const(stride_h), const(stride_w)],
                pads_i=[const(pad_h), const(pad_w), const(pad_h), const(pad_w)],
                dilations_i=[const(dil_h), const(dil_w)], group_i=const(weight_groups),
                offset_group_i=const(offset_groups))


def register_deform_conv() -> None:
    """Teach ``torch.onnx.export`` (TorchScript-based) ``torchvision::deform_conv2d``; idempotent."""
    global _registered
    if not _registered:
        torch.onnx.register_custom_op_symbolic("torchvision::deform_conv2d", _deform_conv2d, DEFORM_CONV_OPSET)
        _registered = True
