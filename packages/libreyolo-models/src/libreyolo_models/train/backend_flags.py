"""cuDNN and determinism flags of a training run: set from its options, restored after it, so a
run's settings never leak into the process (a later predict, another run)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import torch

from .settings import TrainConfig

log = logging.getLogger(__name__)


def set_deterministic(on: bool) -> None:
    """``deterministic=True``: torch's deterministic algorithms (warning where none exists), cuDNN
    deterministic and its autotuner off."""
    if on:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False


def set_autotune(cfg: TrainConfig, device: torch.device, *, steps: int) -> None:
    """cuDNN autotuning, decided once the run's length (``steps`` training steps still to run,
    after a resume too) is known."""
    if cfg.deterministic or device.type != "cuda":
        return
    on = cfg.cudnn_benchmark is True or (cfg.cudnn_benchmark == "auto"
                                         and autotune_pays(steps, multi_scale=cfg.multi_scale))
    if cfg.cudnn_benchmark == "auto" and not on and not cfg.multi_scale:
        log.info("cuDNN autotuning off: %d training steps are too few to repay its one-off search (about half "
                 "a minute for YOLOv9-t); cudnn_benchmark=True turns it on", steps)
    torch.backends.cudnn.benchmark = on  # fixed shapes: autotune each conv once, then reuse


@contextlib.contextmanager
def restored_backend_flags() -> Iterator[None]:
    saved = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
             torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
    try:
        yield
    finally:
        # Only when the run changed it: the call imports torch's compiler (seconds), which a run
        # that never touched the setting has no reason to pay.
        if (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()) != (
                saved[0], saved[1]):
            torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved[2], saved[3]


AUTOTUNE_MIN_STEPS = 2000
"""Training steps below which ``cudnn_benchmark="auto"`` leaves cuDNN's autotuner off. Measured on
an H200 (2026-12-01, YOLOv9-t, batch 32, AMP, channels_last): the search costs 30-34 s at the first
batch and saves about 30 % of an eager step (up to ~28 ms at 640 px), so it repays itself after
roughly 1,100-1,500 steps; the 390-step quick start on ``shapes`` spent 32 of its 74 s to mAP50 0.9
in it. Runs on real datasets (thousands of steps an epoch) keep it."""


def autotune_pays(steps: int, *, multi_scale: bool) -> bool:
    """Whether cuDNN's autotuner is worth its one-off search for a run of ``steps`` training
    steps (never with ``multi_scale``: every new input size would search again)."""
    return not multi_scale and steps >= AUTOTUNE_MIN_STEPS

