"""SyncBatchNorm: BatchNorm statistics over the global batch instead of each rank's slice.

With it, two ranks at batch b/2 train the same model as one rank at batch b (to
float tolerance); without it each rank normalizes over its own slice, which is fine
for large per-rank batches and noisy for small ones.

torch's ``nn.SyncBatchNorm`` refuses CPU tensors, and DDP refuses to wrap a CPU model
holding any ``nn.SyncBatchNorm``, so CPU/Gloo runs (tests, CI, CPU machines) could not
synchronize at all. :func:`convert_sync_batchnorm` therefore uses torch's layer (fused
kernels) for models on CUDA and :class:`PortableSyncBatchNorm` (two differentiable
all-reduces, any device) for everything else. Both keep ``BatchNorm2d``'s parameter
and buffer names, so state dicts load either way.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from libreyolo_ddp.rank_zero import is_rank_zero

log = logging.getLogger(__name__)

SMALL_PER_RANK_BATCH = 16  # below this, per-rank BatchNorm statistics get noticeably noisy


def _native_device_types() -> set[str]:
    """Device types torch's own SyncBatchNorm kernels accept (its forward rejects the rest)."""
    custom = getattr(torch._C, "_get_privateuse1_backend_name", lambda: "privateuseone")()
    return {"cuda", "hpu", "xpu", custom}


class _AllReduceSum(torch.autograd.Function):
    """Sum over ranks whose gradient is again a sum over ranks.

    Every rank's loss depends on every rank's statistics, so the gradient reaching a
    rank's local sums is the sum of all ranks' gradients for the global sums.
    """

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        out = tensor.contiguous().clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        out = grad.contiguous().clone()
        dist.all_reduce(out, group=ctx.group)
        return out, None


class PortableSyncBatchNorm(_BatchNorm):
    """BatchNorm whose training statistics cover every rank's batch, on any device.

    In training mode under a process group it computes the global mean and variance
    with all-reduces (mean first, then the centred sum of squares, which is
    numerically safer than summing raw squares); half-precision inputs are reduced in
    float32. Otherwise it is plain BatchNorm. Every rank must call it the same number
    of times per step, which DDP training does anyway. One host sync per layer (the
    element count) is the price, acceptable for the CPU runs this class serves; on
    CUDA, :func:`convert_sync_batchnorm` picks torch's fused ``nn.SyncBatchNorm``.
    It is deliberately not an ``nn.SyncBatchNorm`` subclass: DDP rejects those on CPU.
    """

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        process_group: Any = None,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device=device, dtype=dtype)
        self.process_group = process_group

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (N, C, ...), got {input.dim()}D with shape {tuple(input.shape)}")

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if self.training and dist.is_available() and dist.is_initialized():
            return self._all_reduce_forward(input)
        return super().forward(input)

    def _momentum_factor(self) -> float:
        factor = 0.0 if self.momentum is None else self.momentum
        if self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        return factor

    def _all_reduce_forward(self, input: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(input)
        if input.shape[1] == 0:
            raise ValueError(f"BatchNorm got an input with 0 channels (shape {tuple(input.shape)})")
        factor = self._momentum_factor()
        group = dist.group.WORLD if self.process_group is None else self.process_group
        x = input.float() if input.dtype in (torch.float16, torch.bfloat16) else input
        channels = x.shape[1]
        dims = [0, *range(2, x.dim())]
        shape = [1, channels] + [1] * (x.dim() - 2)
        local = torch.cat([x.sum(dims), x.new_tensor([float(x.numel() // channels)])])
        totals = _AllReduceSum.apply(local, group)
        count = int(totals[channels].item())
        if count <= 1:
            raise ValueError(
                f"BatchNorm needs more than 1 value per channel when training, got {count} over all ranks "
                f"(input shape {tuple(input.shape)}); use a larger batch"
            )
        mean = totals[:channels] / count
        centred = x - mean.view(shape)
        var = _AllReduceSum.apply((centred * centred).sum(dims), group) / count
        out = centred * torch.rsqrt(var + self.eps).view(shape)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        if self.track_running_stats and self.running_mean is not None and self.running_var is not None:
            with torch.no_grad():
                self.running_mean.mul_(1 - factor).add_(mean.detach().to(self.running_mean.dtype), alpha=factor)
                unbiased = var.detach() * (count / (count - 1))
                self.running_var.mul_(1 - factor).add_(unbiased.to(self.running_var.dtype), alpha=factor)
        return out.to(input.dtype)


def _copy_state(src: _BatchNorm, dst: _BatchNorm) -> _BatchNorm:
    # Share the very Parameter and buffer objects, so an optimizer built before the
    # conversion still updates the converted model.
    if src.affine:
        with torch.no_grad():
            dst.weight = src.weight
            dst.bias = src.bias
    dst.running_mean = src.running_mean
    dst.running_var = src.running_var
    dst.num_batches_tracked = src.num_batches_tracked
    dst.train(src.training)
    if hasattr(src, "qconfig"):
        dst.qconfig = src.qconfig
    return dst


_SYNC_TYPES = (nn.SyncBatchNorm, PortableSyncBatchNorm)


def _to_sync(module: nn.Module, sync_cls: type[_BatchNorm], process_group: Any) -> nn.Module:
    out = module
    if isinstance(module, _BatchNorm) and not isinstance(module, _SYNC_TYPES):
        out = _copy_state(module, sync_cls(
            module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats, process_group,
        ))
        setattr(out, "_libreyolo_bn_cls", type(module))  # noqa: B010 - read by revert_sync_batchnorm
    for name, child in module.named_children():
        out.add_module(name, _to_sync(child, sync_cls, process_group))
    return out


def _sync_class_for(model: nn.Module) -> type[_BatchNorm]:
    tensors = [*model.parameters(), *model.buffers()]
    if tensors and tensors[0].device.type in _native_device_types():
        return nn.SyncBatchNorm
    return PortableSyncBatchNorm


def revert_sync_batchnorm(module: nn.Module) -> nn.Module:
    """Turn SyncBatchNorm layers back into plain BatchNorm (for export or single-device use).

    Layers converted by :func:`convert_sync_batchnorm` get their original class back;
    other SyncBatchNorm layers become ``BatchNorm2d``. Parameters and buffers are shared.
    """
    out = module
    if isinstance(module, _SYNC_TYPES):
        cls = getattr(module, "_libreyolo_bn_cls", nn.BatchNorm2d)
        out = _copy_state(module, cls(
            module.num_features, eps=module.eps, momentum=module.momentum, affine=module.affine,
            track_running_stats=module.track_running_stats,
        ))
    for name, child in module.named_children():
        out.add_module(name, revert_sync_batchnorm(child))
    return out


def count_batchnorm(model: nn.Module) -> int:
    """BatchNorm layers in ``model`` (synchronized or not)."""
    return sum(isinstance(m, _BatchNorm) for m in model.modules())


def convert_sync_batchnorm(
    model: nn.Module, *, enabled: bool, world_size: int, per_rank_batch: int, process_group: Any = None
) -> nn.Module:
    """Synchronize BatchNorm over ranks when asked and distributed; warn when it matters and is off.

    Converts only with ``enabled`` and ``world_size > 1``: in one process there is
    nothing to synchronize and the plain layer is faster. Convert after moving the
    model to its device and before wrapping it in DDP. With sync off, more than one
    rank, a model that has BatchNorm and a per-rank batch under 16, rank 0 logs a
    warning saying what that costs.

    Args:
        model: any module; converted in place where possible, and returned.
        enabled: the user's ``sync_bn`` choice.
        world_size: number of ranks.
        per_rank_batch: images per step on each rank.
        process_group: group to synchronize over; the whole world when None.

    Returns:
        The model to use from now on (the same object unless ``model`` itself is a
        BatchNorm layer).
    """
    layers = count_batchnorm(model)
    if world_size <= 1 or layers == 0:
        return model
    if enabled:
        sync_cls = _sync_class_for(model)
        converted = _to_sync(model, sync_cls, process_group)
        log.info(
            "SyncBatchNorm: %d BatchNorm layer(s) now normalize over all %d ranks (%s)",
            layers, world_size, sync_cls.__name__,
        )
        return converted
    if per_rank_batch < SMALL_PER_RANK_BATCH and is_rank_zero():
        log.warning(
            "sync_bn is off and the model has %d BatchNorm layer(s): each of the %d ranks normalizes over its own "
            "%d images, not the global %d, so BatchNorm statistics are noisier than one GPU at the same global "
            "batch and accuracy can drop. Pass sync_bn=True, or use a per-rank batch of %d or more.",
            layers, world_size, per_rank_batch, per_rank_batch * world_size, SMALL_PER_RANK_BATCH,
        )
    return model
