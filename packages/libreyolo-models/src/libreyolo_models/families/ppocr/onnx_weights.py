"""PP-OCR ONNX models (as RapidOCR ships them) -> this family's state dict.

The exported graphs carry no parameter names (Paddle2ONNX stores weights as anonymous constants),
so the mapping is by order: the graph's parameter tensors in node order against our modules'
parameters in the order the forward first calls each module, each shape checked. Which constants
are parameters follows from the operator that reads them (convolutions, batch norms, matrix
products and their bias additions, the learnable scalar affines whose scale is the first operand).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ...errors import CheckpointError

_WEIGHT_OPS = {"Conv": 1, "ConvTranspose": 1, "BatchNormalization": 1, "MatMul": 1}


def onnx_parameters(path: str | Path) -> tuple[list[np.ndarray], dict[str, str]]:
    """The parameter tensors of an ONNX model in node order, and its metadata (the recogniser's
    ``character`` dictionary lives there)."""
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError as exc:  # pragma: no cover - the export extra installs it
        raise CheckpointError("reading PP-OCR ONNX files needs the 'onnx' package: pip install onnx") from exc
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such ONNX file")
    model = onnx.load(str(path))
    consts: dict[str, np.ndarray] = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            consts[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    params: list[np.ndarray] = []
    param_outputs: set[str] = set()
    for node in model.graph.node:
        if node.op_type == "Reshape" and all(i in consts for i in node.input):  # a bias shaped [1, C, 1, 1]
            consts[node.output[0]] = consts[node.input[0]].reshape(consts[node.input[1]])
            continue
        taken = _node_parameters(node.op_type, list(node.input), consts, param_outputs)
        params.extend(taken)
        if taken and node.op_type not in ("Add", "BatchNormalization"):  # what a bias may follow
            param_outputs.update(node.output)
    return params, {p.key: p.value for p in model.metadata_props}


def _node_parameters(op: str, inputs: list[str], consts: dict[str, np.ndarray],
                     param_outputs: set[str]) -> list[np.ndarray]:
    if op in _WEIGHT_OPS:
        return [consts[i] for i in inputs[_WEIGHT_OPS[op]:] if i in consts]
    if op not in ("Mul", "Add") or len(inputs) != 2:
        return []
    a, b = inputs
    if op == "Mul" and a in consts and b not in consts:  # the scalar affine's scale comes first
        return [consts[a]]
    const, other = (a, b) if a in consts else (b, a)
    if const not in consts or other in consts:
        return []
    if op == "Mul" and consts[const].size > 1:  # a layer norm's weight
        return [consts[const]]
    if op == "Add" and other in param_outputs:  # the bias after a scale, a matrix product, a transposed conv
        return [consts[const]]
    return []


def call_order(net: nn.Module, run: Callable[[], Any]) -> list[nn.Module]:
    """The modules holding tensors of their own, in the order ``run()`` first calls them."""
    order: list[nn.Module] = []
    hooks = []
    for module in net.modules():
        if any(True for _ in module.parameters(recurse=False)) or any(
                b.is_floating_point() for b in module.buffers(recurse=False)):
            def record(mod: nn.Module, *_: Any) -> None:
                if not any(m is mod for m in order):
                    order.append(mod)
            hooks.append(module.register_forward_pre_hook(record))
    try:
        with torch.no_grad():
            run()
    finally:
        for h in hooks:
            h.remove()
    return order


def _slots(module: nn.Module) -> Iterator[tuple[str, Tensor]]:
    """A module's tensors in the exported graph's order (a batch norm: scale, bias, mean, variance)."""
    names = ["weight", "bias", "running_mean", "running_var", "scale"]
    if hasattr(module, "scale"):
        names = ["scale", "bias"]
    for name in names:
        t = getattr(module, name, None)
        if isinstance(t, Tensor) and t.is_floating_point():
            yield name, t


def assign_in_order(net: nn.Module, run: Callable[[], Any], arrays: list[np.ndarray], what: str) -> None:
    """Copy ``arrays`` into ``net``'s tensors in call order; a count or shape mismatch names both sides."""
    prefix = {id(m): n for n, m in net.named_modules()}
    slots = [(f"{prefix[id(m)]}.{n}", m, t) for m in call_order(net, run) for n, t in _slots(m)]
    if len(slots) != len(arrays):
        raise CheckpointError(f"{what}: the ONNX graph holds {len(arrays)} parameter tensors, the network "
                              f"{len(slots)}; this is not a PP-OCRv4 mobile model this converter knows")
    with torch.no_grad():
        for (key, module, t), a in zip(slots, arrays):
            value = torch.from_numpy(np.array(a, dtype=np.float32, copy=True))
            if isinstance(module, nn.Linear) and key.endswith("weight"):
                value = value.T  # ONNX MatMul keeps (in, out)
            if value.numel() == t.numel() and value.shape != t.shape and key.endswith("bias"):
                value = value.reshape(t.shape)  # a bias added as [1, C, 1, 1] after the conv
            if value.shape != t.shape:
                raise CheckpointError(f"{what}: {key} expects {tuple(t.shape)}, the ONNX graph's tensor there "
                                      f"is {tuple(a.shape)}")
            t.copy_(value)


def convert(det_onnx: str | Path, rec_onnx: str | Path, cls_onnx: str | Path, net: nn.Module) -> None:
    """Load RapidOCR's ``ch_PP-OCRv4_det_infer.onnx``, ``ch_PP-OCRv4_rec_infer.onnx`` and
    ``ch_ppocr_mobile_v2.0_cls_infer.onnx`` into ``net`` (a ``PPOCRNet``); the recogniser's
    dictionary must be the one this family ships."""
    from .ctc import characters

    det, _ = onnx_parameters(det_onnx)
    rec, meta = onnx_parameters(rec_onnx)
    angle, _ = onnx_parameters(cls_onnx)
    shipped = list(characters()[1:-1])
    if "character" in meta and meta["character"].split("\n") != shipped:
        raise CheckpointError(f"{rec_onnx}: its character dictionary differs from the shipped ppocr_keys_v1 "
                              f"({len(meta['character'].split(chr(10)))} vs {len(shipped)} entries)")
    was_training = net.training
    net.eval()
    det_net, rec_net, cls_net = net.get_submodule("det"), net.get_submodule("rec"), net.get_submodule("angle")
    try:
        assign_in_order(det_net, lambda: det_net(torch.zeros(1, 3, 64, 64)), det, str(det_onnx))
        assign_in_order(rec_net, lambda: rec_net(torch.zeros(1, 3, 48, 64)), rec, str(rec_onnx))
        assign_in_order(cls_net, lambda: cls_net(torch.zeros(1, 3, 48, 192)), angle, str(cls_onnx))
    finally:
        net.train(was_training)
