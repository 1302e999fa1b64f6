"""When RT-DETR must pick deterministic kernels over the fastest ones.

Two kernels it would use have CUDA backwards that accumulate with atomics (results vary in the
last bits run to run): ``grid_sample`` (deformable attention) and the fused attention kernels
behind ``scaled_dot_product_attention``. Under ``torch.use_deterministic_algorithms`` (the
trainer's ``deterministic=True``) a CUDA backward takes plain-op equivalents instead, so two runs
(eager and graphed, say) agree bit for bit. Everywhere else the fast kernels are used; both give
the same numbers up to rounding.
"""

from __future__ import annotations

import torch
from torch import Tensor


def needs_deterministic_backward(x: Tensor) -> bool:
    """Whether a CUDA backward through ``x`` must be deterministic (deterministic mode, grad on)."""
    return x.is_cuda and torch.is_grad_enabled() and torch.are_deterministic_algorithms_enabled()
