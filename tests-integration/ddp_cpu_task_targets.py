"""Worker functions for the two-process Gloo tests of the point and restore tasks (module level:
spawn pickles them by name). Each runs several models in one spawn: a rank's start (a torch
import) costs more than the work."""

from __future__ import annotations

from ddp_cpu_targets import train_two_ranks, validate_shard


def validate_all(jobs: list[tuple[str, str]]) -> list[dict]:
    """``validate_shard`` of each ``(weights, data)``."""
    return [validate_shard(weights, data, 64, "val") for weights, data in jobs]


def train_all(jobs: list[tuple[str, str]], project: str) -> list[dict]:
    """``train_two_ranks`` of each ``(weights, data)``, in its own run folder."""
    return [train_two_ranks(weights, data, f"{project}/{i}") for i, (weights, data) in enumerate(jobs)]
