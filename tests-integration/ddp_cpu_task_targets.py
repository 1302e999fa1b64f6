"""Worker functions for the two-process Gloo tests of the point and restore tasks (module level:
spawn pickles them by name). Each runs several models in one spawn: a rank's start (a torch
import) costs more than the work."""

from __future__ import annotations

from ddp_cpu_targets import train_two_ranks, validate_shard


def validate_all(jobs: list[tuple[str, ...]]) -> list[dict]:
    """``validate_shard`` of each ``(weights, data)`` at 64 px, or ``(weights, data, imgsz)``."""
    return [validate_shard(job[0], job[1], int(job[2]) if len(job) > 2 else 64, "val") for job in jobs]


def train_all(jobs: list[tuple[str, str]], project: str) -> list[dict]:
    """``train_two_ranks`` of each ``(weights, data)``, in its own run folder."""
    return [train_two_ranks(weights, data, f"{project}/{i}") for i, (weights, data) in enumerate(jobs)]
