"""What runs inside each spawned worker: restore the parent's state, join the group, run, report.

A spawned interpreter starts empty: no logging configuration, default cuDNN and
determinism flags. What a worker would otherwise lose travels in :class:`WorkerSetup`
and is restored before the user's function runs. The worker reports exactly one
message to the parent (its result or its traceback) and never outlives the parent.
"""

from __future__ import annotations

import logging
import multiprocessing.connection
import os
import pickle
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from libreyolo_ddp.backend import destroy_distributed, init_distributed
from libreyolo_ddp.parent_watch import exit_with_parent
from libreyolo_ddp.rank_zero import configure_rank_logging

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProcessState:
    """Process-wide torch switches a fresh interpreter would reset to defaults."""

    cudnn_benchmark: bool
    cudnn_deterministic: bool
    deterministic_algorithms: bool
    deterministic_warn_only: bool
    float32_matmul_precision: str

    @classmethod
    def capture(cls) -> ProcessState:
        return cls(
            cudnn_benchmark=bool(torch.backends.cudnn.benchmark),
            cudnn_deterministic=bool(torch.backends.cudnn.deterministic),
            deterministic_algorithms=torch.are_deterministic_algorithms_enabled(),
            deterministic_warn_only=torch.is_deterministic_algorithms_warn_only_enabled(),
            float32_matmul_precision=torch.get_float32_matmul_precision(),
        )

    def restore(self) -> None:
        torch.backends.cudnn.benchmark = self.cudnn_benchmark
        torch.backends.cudnn.deterministic = self.cudnn_deterministic
        torch.use_deterministic_algorithms(self.deterministic_algorithms, warn_only=self.deterministic_warn_only)
        torch.set_float32_matmul_precision(self.float32_matmul_precision)


@dataclass(frozen=True)
class LoggingState:
    """The parent's root-logger setup, so workers log where and how the parent does."""

    level: int
    fmt: str | None
    datefmt: str | None
    has_handlers: bool

    @classmethod
    def capture(cls) -> LoggingState:
        root = logging.getLogger()
        formatter = root.handlers[0].formatter if root.handlers else None
        return cls(
            level=root.level,
            fmt=getattr(formatter, "_fmt", None),
            datefmt=getattr(formatter, "datefmt", None),
            has_handlers=bool(root.handlers),
        )

    def restore(self, rank: int) -> None:
        root = logging.getLogger()
        if self.has_handlers and not root.handlers:
            # Mirrors a configuration the application made in the parent; the worker is a
            # process we created, and without this its INFO lines would vanish.
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter(self.fmt, self.datefmt))
            root.addHandler(handler)
        root.setLevel(self.level)
        configure_rank_logging(rank)


@dataclass(frozen=True)
class WorkerSetup:
    """Everything a worker needs besides the user's function and arguments."""

    world_size: int
    backend: str
    timeout_s: float
    process_state: ProcessState
    logging_state: LoggingState
    env: dict[str, str] = field(default_factory=dict)


def _report(conn: multiprocessing.connection.Connection, payload: bytes) -> None:
    try:
        conn.send_bytes(payload)
    except (BrokenPipeError, OSError):
        pass  # the parent is gone or tearing down; nobody is left to tell
    finally:
        conn.close()


def _error_payload(rank: int, err: BaseException) -> bytes:
    text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    return pickle.dumps(("error", {"rank": rank, "type": type(err).__name__, "message": str(err), "traceback": text}))


def worker_main(
    rank: int,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    conn: multiprocessing.connection.Connection,
    setup: WorkerSetup,
) -> None:
    """Entry point of one spawned worker (module level, so ``spawn`` can pickle it by name)."""
    # Single machine: local rank == global rank. The shared variables (MASTER_*, WORLD_SIZE,
    # CUDA_VISIBLE_DEVICES) were in the environment the worker started with; set again in
    # case the user's re-imported script changed them.
    os.environ.update({**setup.env, "RANK": str(rank), "LOCAL_RANK": str(rank)})
    exit_with_parent()
    try:
        setup.process_state.restore()
        setup.logging_state.restore(rank)
        init_distributed(setup.backend, timeout_s=setup.timeout_s)  # type: ignore[arg-type]
        value = fn(*args)
        try:
            payload = pickle.dumps(("ok", value if rank == 0 else None))
        except Exception as err:  # noqa: BLE001 - reported as the worker's failure
            raise TypeError(
                f"rank 0's return value ({type(value).__name__}) cannot be pickled back to the parent: {err}. "
                f"Return plain data: numbers, strings, dicts/lists, CPU tensors (call .cpu() first)"
            ) from err
        destroy_distributed()
    except BaseException as err:  # noqa: BLE001 - every failure goes to the parent with its traceback
        _report(conn, _error_payload(rank, err))
        sys.stdout.flush()
        sys.stderr.flush()
        # Skip interpreter shutdown: with peers blocked in a collective, tearing down the
        # process group can block; the parent terminates the peers anyway.
        os._exit(1)
    _report(conn, payload)
