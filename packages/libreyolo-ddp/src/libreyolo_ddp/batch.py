"""The global-batch rule: ``batch`` is images per optimizer step over all ranks.

Each rank trains at ``batch // world_size``. A batch that does not divide is an error,
never a silent floor: 30 on 4 GPUs would otherwise train at 28 and the learning-rate
and warm-up schedules tuned for 30 would be subtly wrong. The same rule keeps the
global batch when a run resumes on a different number of devices.
"""

from __future__ import annotations

from libreyolo_ddp.errors import BatchSplitError


def _nearest_valid(batch: int, world_size: int) -> list[int]:
    below = (batch // world_size) * world_size
    above = below + world_size
    return ([below] if below >= world_size else []) + [above]


def split_global_batch(batch: int, world_size: int, *, source: str | None = None) -> int:
    """Images per step on each rank for a global ``batch`` over ``world_size`` ranks.

    Args:
        batch: the global batch, a positive integer (resolve ``batch=-1`` first with
            :func:`~libreyolo_ddp.resolve_autobatch`).
        world_size: number of ranks, >= 1.
        source: where ``batch`` came from (e.g. "checkpoint last.pt" on resume); added
            to the message when given.

    Returns:
        ``batch // world_size``.

    Raises:
        BatchSplitError: ``batch`` is not a positive multiple of ``world_size``; the
            message names the nearest valid values below and above.
    """
    where = f" (from {source})" if source else ""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise BatchSplitError(f"world_size={world_size!r} must be a positive integer (the number of ranks)")
    if isinstance(batch, bool) or not isinstance(batch, int):
        raise BatchSplitError(f"batch={batch!r}{where} must be an integer number of images per optimizer step")
    if batch == -1:
        raise BatchSplitError(
            f"batch=-1{where} (autobatch) must be resolved to a number before it is split; "
            f"call resolve_autobatch(...) first, or pass a fixed batch such as batch={16 * world_size}"
        )
    if batch < 1:
        raise BatchSplitError(f"batch={batch}{where} must be a positive integer, or -1 for autobatch")
    if batch % world_size:
        options = " or ".join(f"batch={v}" for v in _nearest_valid(batch, world_size))
        suffix = f" ({source})" if source else ""
        raise BatchSplitError(
            f"batch={batch} is the global batch and must be divisible by world_size={world_size}: "
            f"each rank trains at batch // world_size, so this would silently train a different "
            f"global batch than requested. Use {options}.{suffix}"
        )
    return batch // world_size
