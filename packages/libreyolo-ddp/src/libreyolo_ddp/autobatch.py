"""``batch=-1``: measure how many images fit on one GPU, then agree on one global batch.

Probing is done once: by the parent before it spawns workers (the workers then get a
fixed number), or under torchrun by rank 0 alone, which broadcasts the result as one
long tensor. Ranks that probed separately could disagree by an image or two, and a
global batch that differs between ranks is a silent bug.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist

from libreyolo_ddp.collectives import comm_device, is_dist_initialized
from libreyolo_ddp.env import DistEnv, dist_env
from libreyolo_ddp.errors import AutobatchError

log = logging.getLogger(__name__)

DEFAULT_CANDIDATES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)


def _checked_per_gpu(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise AutobatchError(f"the autobatch probe returned {value!r}; it must return a positive integer batch per GPU")
    return value


def _probe_on_rank_zero(probe: Callable[[], int], rank: int) -> int:
    """Rank 0 probes, everyone receives; a failed probe fails every rank instead of hanging them."""
    failure: BaseException | None = None
    value = -1
    if rank == 0:
        try:
            value = _checked_per_gpu(probe())
        except BaseException as err:  # noqa: BLE001 - re-raised below, after the others are released
            failure = err
    box = torch.tensor([value], dtype=torch.long, device=comm_device())
    dist.broadcast(box, src=0)
    if failure is not None:
        raise failure
    received = int(box.item())
    if received < 1:
        raise AutobatchError(
            f"rank {rank}: rank 0 failed to measure the batch size for batch=-1 (its log has the cause); "
            f"pass a fixed batch instead"
        )
    return received


def resolve_autobatch(probe: Callable[[], int], *, world_size: int, nbs: int, env: DistEnv | None = None) -> int:
    """Resolve ``batch=-1`` to a global batch, probing exactly once.

    The result is ``min(per_gpu * world_size, nbs)`` rounded down to a multiple of
    ``world_size`` and at least ``world_size``: more than the nominal batch size buys
    nothing (the loss is scaled to ``nbs``), and the global batch must split evenly.

    Args:
        probe: returns how many images fit on ONE GPU (e.g. a closure over
            :func:`probe_batch_size`). Called once, in this process (a parent before
            spawn, or a single process), or on rank 0 only when a process group of
            two or more ranks exists (torchrun); other ranks receive rank 0's value.
        world_size: number of ranks the batch will be split over.
        nbs: nominal batch size; the global batch is capped at it.
        env: this process's place; :func:`dist_env` when None.

    Returns:
        The global batch (a multiple of ``world_size``), the same on every rank.

    Raises:
        AutobatchError: the probe failed or returned a non-positive value, or torchrun
            launched this process but no process group exists to broadcast with.
    """
    env = dist_env() if env is None else env
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise AutobatchError(f"world_size={world_size!r} must be a positive integer")
    if isinstance(nbs, bool) or not isinstance(nbs, int) or nbs < 1:
        raise AutobatchError(f"nbs={nbs!r} (nominal batch size) must be a positive integer")
    if is_dist_initialized() and dist.get_world_size() > 1:
        per_gpu = _probe_on_rank_zero(probe, dist.get_rank())
        where = "rank 0, broadcast"
    elif env.is_torchrun and env.world_size > 1:
        raise AutobatchError(
            f"rank {env.rank}: batch=-1 under torchrun needs the process group first, so that only rank 0 "
            f"probes and the others receive its value; call init_distributed() before resolve_autobatch()"
        )
    else:
        per_gpu = _checked_per_gpu(probe())
        where = "this process"
    capped = min(per_gpu * world_size, nbs)
    batch = max(world_size, capped // world_size * world_size)
    log.info(
        "autobatch: %d images/GPU (probed on %s) x %d rank(s) = %d, capped at nbs=%d -> global batch %d (%d per rank)",
        per_gpu, where, world_size, per_gpu * world_size, nbs, batch, batch // world_size,
    )
    return batch


def fit_batch_size(samples: Sequence[tuple[int, int]], budget_bytes: float, *, ceiling: int | None = None) -> int:
    """Largest batch whose predicted memory stays within a budget, from measured points.

    Fits ``memory = a + b * batch`` by least squares. With one point the model is
    proportional (``a = 0``); when memory does not grow with the batch there is
    nothing to extrapolate and the largest measured batch is returned.

    Args:
        samples: ``(batch, peak_bytes)`` pairs measured on the device.
        budget_bytes: memory the batch may use.
        ceiling: upper bound (e.g. one below the first batch that ran out of memory).

    Returns:
        A batch >= 1 (and <= ``ceiling`` when given).
    """
    if not samples:
        raise AutobatchError("no memory measurements to fit a batch size from")
    xs = [float(b) for b, _ in samples]
    ys = [float(m) for _, m in samples]
    if len(samples) == 1:
        slope, intercept = ys[0] / xs[0], 0.0
    else:
        mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
        var_x = sum((x - mean_x) ** 2 for x in xs)
        slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / var_x if var_x else 0.0
        intercept = mean_y - slope * mean_x
    if slope <= 0:
        best = int(max(xs))
    else:
        best = int((budget_bytes - intercept) // slope)
    if ceiling is not None:
        best = min(best, ceiling)
    return max(1, best)


def _is_oom(err: BaseException) -> bool:
    oom_type = getattr(torch.cuda, "OutOfMemoryError", None)
    return (oom_type is not None and isinstance(err, oom_type)) or "out of memory" in str(err).lower()


def probe_batch_size(
    step_fn: Callable[[int], None],
    device: torch.device | str,
    fraction: float = 0.6,
    candidates: Sequence[int] = DEFAULT_CANDIDATES,
) -> int:
    """Measure how many images per step fit on one CUDA device.

    Runs ``step_fn(b)`` (one forward+backward at batch ``b``, the caller's job) for
    increasing candidates, records ``torch.cuda.max_memory_reserved`` for each, stops
    at the first out-of-memory or once a step exceeds the budget, and fits memory
    linearly in the batch (:func:`fit_batch_size`) to pick the batch that uses
    ``fraction`` of the device's total memory. The cache is emptied between steps so
    each peak is that step's own.

    Args:
        step_fn: runs one training step at the given batch; must free its tensors.
        device: the CUDA device to measure.
        fraction: share of total device memory to plan for, in (0, 1].
        candidates: batches to try, ascending.

    Returns:
        Images per step that fit on this device.

    Raises:
        AutobatchError: the device is not CUDA, or even the smallest candidate ran out
            of memory.
    """
    device = torch.device(device)
    if device.type != "cuda":
        raise AutobatchError(
            f"batch=-1 (autobatch) measures GPU memory and needs a CUDA device, but training runs on "
            f"{device.type!r}; pass a fixed batch instead, e.g. batch=16"
        )
    if not 0 < fraction <= 1:
        raise AutobatchError(f"fraction={fraction} must be in (0, 1]: the share of GPU memory to fill")
    if not candidates or any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in candidates):
        raise AutobatchError(f"candidates={tuple(candidates)!r} must be positive integers")
    total = torch.cuda.get_device_properties(device).total_memory
    budget = fraction * total
    samples: list[tuple[int, int]] = []
    oom_at: int | None = None
    for batch in sorted(candidates):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        try:
            step_fn(batch)
            torch.cuda.synchronize(device)
        except RuntimeError as err:
            if not _is_oom(err):
                raise
            oom_at = batch
        if oom_at is not None:
            break  # outside the except block, so the error's frames (and their tensors) are gone
        samples.append((batch, torch.cuda.max_memory_reserved(device)))
        if samples[-1][1] > budget:
            break
    torch.cuda.empty_cache()
    if not samples:
        raise AutobatchError(
            f"batch=-1: even batch={min(candidates)} ran out of memory on {device}; use a smaller imgsz or model"
        )
    best = fit_batch_size(samples, budget, ceiling=None if oom_at is None else oom_at - 1)
    log.info(
        "autobatch probe on %s: %s -> %d images fit in %.0f%% of %.1f GiB",
        device, ", ".join(f"b{b}={m / 2**30:.2f}GiB" for b, m in samples), best, fraction * 100, total / 2**30,
    )
    return best
