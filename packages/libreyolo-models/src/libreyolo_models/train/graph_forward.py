"""The CUDA-graph call site of training: which forward the step runs, graphed or eager.

``train(cuda_graph=True)`` captures the network half (forward and backward) once a batch shape
has repeated three times; the loss stays eager. Where capture is not allowed or cannot help, one
log line says why and training runs eagerly, unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from .settings import TrainConfig

if TYPE_CHECKING:
    from ..model import LibreYOLO

log = logging.getLogger(__name__)

REPEAT_THRESHOLD = 3


def graph_forward(model: LibreYOLO, module: nn.Module, cfg: TrainConfig, *, device: torch.device,
                  world_size: int) -> Callable[[Tensor], list[Tensor]]:
    """``module`` itself (eager), or a ``GraphedTraining`` around it when capture is allowed."""
    model._train_graphs = None
    if not cfg.cuda_graph:
        return module
    reason = None
    if world_size > 1:
        reason = "multi-GPU (DDP) training runs eagerly"
    elif device.type != "cuda":
        reason = f"training runs on {device}, and CUDA graphs need a CUDA GPU"
    elif not model.spec.train_capture_verified:
        reason = (f"{model.spec.display_name} is not verified for training capture "
                  "(its training row in docs/parity-matrix.md is not green)")
    if reason is not None:
        log.info("cuda_graph=True ignored: %s; training eagerly", reason)
        return module
    if cfg.multi_scale:
        log.info("cuda_graph=True with multi_scale=True: the batch shape changes every step, so shapes rarely "
                 "repeat and most steps run eagerly")
    from libreyolo_cudagraph import GraphedTraining

    graphed = GraphedTraining(module, repeat_threshold=REPEAT_THRESHOLD, name=f"{model.spec.name}-{model.size}")
    model._train_graphs = graphed
    log.info("cuda_graph=True: forward+backward captured once a batch shape repeats %d times; loss stays eager",
             REPEAT_THRESHOLD)
    return graphed
