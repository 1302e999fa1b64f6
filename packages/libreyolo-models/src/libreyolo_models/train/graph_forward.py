"""The CUDA-graph call site of training: which forward the step runs, graphed or eager.

``train(cuda_graph=True)`` captures the network half (forward and backward) once a batch shape
has repeated three times; the loss stays eager. Under DDP the SyncBatchNorm collectives are
captured with it and the ranks take every graph decision together. Where capture is not allowed
or cannot help, one log line says why and training runs eagerly, unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

import libreyolo_ddp

from ..certificate import certified_divergence, training_precision
from ..contract.family import has_training_head
from .settings import TrainConfig

if TYPE_CHECKING:
    from ..handle import ModelHandle

log = logging.getLogger(__name__)

REPEAT_THRESHOLD = 3


def wants_graphs(model: ModelHandle, cfg: TrainConfig, *, device: torch.device) -> bool:
    """Whether this run captures its training steps (else one log line says why not)."""
    if not cfg.cuda_graph:
        return False
    reason = None
    if device.type != "cuda":
        reason = f"training runs on {device}, and CUDA graphs need a CUDA GPU"
    elif not model.spec.task(model.task).train_capture:
        reason = (f"{model.spec.display_name} ({model.task}) is not verified for training capture "
                  "(its training row in docs/parity-matrix.md is not green)")
    else:
        reason = divergence_reason(model, training_precision(cfg.amp, device), device.type)
    if reason is not None:
        log.info("cuda_graph=True ignored: %s; training eagerly", reason)
        return False
    return True


def divergence_reason(model: ModelHandle, dtype: str, device: str, path: Path | None = None) -> str | None:
    """Why a configuration certified ``diverges`` is trained eagerly, or None (docs/parity-matrix.md:
    graphed training differs from eager beyond eager's own spread there)."""
    cert = certified_divergence(model.spec.name, model.task, dtype, device, path)
    if cert is None:
        return None
    return (f"its {dtype} training on {device} is certified 'diverges' (docs/parity-matrix.md: measured on "
            f"{cert.gpu or device}, {cert.date}): graphed steps differ from eager beyond what two eager runs "
            "differ by, so graphed training is not offered there")


def graph_forward(model: ModelHandle, module: nn.Module, cfg: TrainConfig, *, world_size: int) -> Callable[[Tensor], Any]:
    """A ``GraphedTraining`` around ``module`` (call only when ``wants_graphs``). Under several
    ranks every graph decision is voted on (``libreyolo_ddp.agree_min``), so the ranks capture,
    replay, fall back and latch together and the SyncBatchNorm collectives in the graph pair up."""
    if cfg.multi_scale:
        log.info("cuda_graph=True with multi_scale=True: the batch shape changes every step, so shapes rarely "
                 "repeat and most steps run eagerly")
    from libreyolo_cudagraph import GraphedTraining

    agree = libreyolo_ddp.agree_min if world_size > 1 else None
    graphed = GraphedTraining(module, repeat_threshold=REPEAT_THRESHOLD, name=f"{model.spec.name}-{model.size}",
                              agree=agree)
    model.graphs.attach_training(graphed)
    eager = "loss stays eager"
    if has_training_head(model.family):
        eager = (model.family.training_head_note
                 or "the family's target-dependent training head and the loss stay eager (split capture)")
    ranks = f"; {world_size} ranks decide together, gradients averaged in one all-reduce" if world_size > 1 else ""
    log.info("cuda_graph=True: forward+backward captured once a batch shape repeats %d times; %s%s",
             REPEAT_THRESHOLD, eager, ranks)
    return graphed
