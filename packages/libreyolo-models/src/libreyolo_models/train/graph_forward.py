"""The CUDA-graph call site of training: which forward the step runs, graphed or eager.

``train(cuda_graph=True)`` captures the network half (forward and backward) once a batch shape
has repeated three times; the loss stays eager. Where capture is not allowed or cannot help, one
log line says why and training runs eagerly, unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from ..contract import has_training_head
from .settings import TrainConfig

if TYPE_CHECKING:
    from ..facade import LibreYOLO

log = logging.getLogger(__name__)

REPEAT_THRESHOLD = 3


def graph_forward(model: LibreYOLO, module: nn.Module, cfg: TrainConfig, *, device: torch.device,
                  world_size: int) -> Callable[[Tensor], Any]:
    """``module`` itself (eager), or a ``GraphedTraining`` around it when capture is allowed."""
    model.graphs.attach_training(None)
    if not cfg.cuda_graph:
        return module
    reason = None
    if world_size > 1:
        reason = "multi-GPU (DDP) training runs eagerly"
    elif device.type != "cuda":
        reason = f"training runs on {device}, and CUDA graphs need a CUDA GPU"
    elif not model.spec.task(model.task).train_capture:
        reason = (f"{model.spec.display_name} ({model.task}) is not verified for training capture "
                  "(its training row in docs/parity-matrix.md is not green)")
    if reason is not None:
        log.info("cuda_graph=True ignored: %s; training eagerly", reason)
        return module
    if cfg.multi_scale:
        log.info("cuda_graph=True with multi_scale=True: the batch shape changes every step, so shapes rarely "
                 "repeat and most steps run eagerly")
    from libreyolo_cudagraph import GraphedTraining

    graphed = GraphedTraining(module, repeat_threshold=REPEAT_THRESHOLD, name=f"{model.spec.name}-{model.size}")
    model.graphs.attach_training(graphed)
    eager = "loss stays eager"
    if has_training_head(model.family):
        eager = (model.family.training_head_note
                 or "the family's target-dependent training head and the loss stay eager (split capture)")
    log.info("cuda_graph=True: forward+backward captured once a batch shape repeats %d times; %s",
             REPEAT_THRESHOLD, eager)
    return graphed
