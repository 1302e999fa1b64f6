"""Cache keys for captured graphs: everything a graph bakes in that a later call could change.

A graph replays fixed kernels on fixed addresses. It is only valid for a call whose inputs have
the same shapes, dtypes, strides and device, under the same training flag, grad mode, autocast
state and backend flags. Input values are not part of the key: they are copied into static
buffers. Where parameters and buffers live is checked separately (:mod:`.storage`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
from torch import Tensor

InputKey = tuple[tuple[int, ...], torch.dtype, tuple[int, ...], torch.device, bool]
Signature = tuple[object, ...]


def autocast_state() -> tuple[bool, torch.dtype | None, bool]:
    """CUDA autocast: (enabled, dtype when enabled, weight-cast cache enabled)."""
    if not torch.is_autocast_enabled("cuda"):
        return (False, None, False)
    return (True, torch.get_autocast_dtype("cuda"), torch.is_autocast_cache_enabled())


def _tf32_flags() -> tuple[object, object]:
    try:
        return (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    except RuntimeError:
        # Newer torch may refuse to read the legacy flags once the fp32_precision API set them.
        return (
            getattr(getattr(torch.backends.cudnn, "conv", None), "fp32_precision", None),
            getattr(torch.backends.cuda.matmul, "fp32_precision", None),
        )


def backend_flags() -> tuple[object, ...]:
    """Flags that change which kernels eager picks; a graph keeps the ones it was captured with."""
    cudnn = torch.backends.cudnn
    return (
        cudnn.enabled,
        cudnn.benchmark,
        cudnn.deterministic,
        *_tf32_flags(),
        torch.get_float32_matmul_precision(),
        torch.are_deterministic_algorithms_enabled(),
    )


def input_keys(inputs: Sequence[Tensor]) -> tuple[InputKey, ...]:
    """Per input: shape, dtype, stride, device, requires_grad."""
    return tuple((x.shape, x.dtype, x.stride(), x.device, x.requires_grad) for x in inputs)


def call_signature(inputs: Sequence[Tensor], training: bool | None) -> Signature:
    """The full cache key of one call (inputs plus the ambient state a graph bakes in)."""
    return (
        input_keys(inputs),
        training,
        torch.is_grad_enabled(),
        torch.is_inference_mode_enabled(),
        autocast_state(),
        backend_flags(),
    )


_DTYPE_SHORT = {
    torch.float32: "f32",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.float64: "f64",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.uint8: "u8",
    torch.bool: "bool",
}


def _describe_input(key: InputKey) -> str:
    shape, dtype, stride, device, requires_grad = key
    text = f"{_DTYPE_SHORT.get(dtype, str(dtype).removeprefix('torch.'))}[{'x'.join(map(str, shape))}]"
    if len(shape) == 4 and stride == _channels_last_stride(shape) and stride != _contiguous_stride(shape):
        text += " channels_last"
    elif stride != _contiguous_stride(shape):
        text += f" stride={stride}"
    text += f" {device}"
    return text + (" requires_grad" if requires_grad else "")


def _contiguous_stride(shape: tuple[int, ...]) -> tuple[int, ...]:
    stride, acc = [], 1
    for size in reversed(shape):
        stride.append(acc)
        acc *= max(size, 1)
    return tuple(reversed(stride))


def _channels_last_stride(shape: tuple[int, ...]) -> tuple[int, ...]:
    n, c, h, w = shape
    return (h * w * c, 1, w * c, c)


def describe_signature(sig: Signature) -> str:
    """One readable line for logs and ``info()``: inputs | mode flags | autocast."""
    inputs, training, grad, inference, autocast, flags = sig
    parts = [", ".join(_describe_input(k) for k in inputs) or "no inputs"]  # type: ignore[attr-defined]
    if training is not None:
        parts.append("train" if training else "eval")
    parts.append("inference_mode" if inference else ("grad" if grad else "no_grad"))
    enabled, dtype, _cache = cast("tuple[bool, torch.dtype, bool]", autocast)
    parts.append(f"autocast {_DTYPE_SHORT.get(dtype, dtype)}" if enabled else "no autocast")
    _enabled, benchmark, deterministic = flags[:3]  # type: ignore[index]
    chosen = [
        name for name, on in (("cudnn.benchmark", benchmark), ("cudnn.deterministic", deterministic)) if on
    ]
    if chosen:
        parts.append(" ".join(chosen))
    return " | ".join(parts)
