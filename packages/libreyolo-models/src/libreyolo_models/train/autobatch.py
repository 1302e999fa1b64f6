"""``batch=-1``: the one place the training batch is fitted to GPU memory.

Called by every rank before training: in one process it probes here; with a process group
(spawned workers or torchrun) rank 0 probes and broadcasts (``libreyolo_ddp.resolve_autobatch``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

import libreyolo_ddp

from ..contract import has_training_head
from ..errors import ConfigError

if TYPE_CHECKING:
    from ..facade import LibreYOLO
    from .plan import TrainPlan


def resolve_batch(model: LibreYOLO, plan: TrainPlan) -> TrainPlan:
    """``plan`` unchanged for a fixed batch, else with the global batch that fits."""
    if plan.global_batch != -1:
        return plan
    if plan.devices.type != "cuda":
        raise ConfigError("batch=-1 (fit the batch to GPU memory) needs a CUDA device; on "
                          f"{plan.devices.type} pass a fixed batch, e.g. batch=16")
    device = libreyolo_ddp.local_device() if libreyolo_ddp.dist_env().world_size > 1 else plan.devices.torch_device(0)
    fraction = memory_fraction(graphed=bool(plan.cfg.cuda_graph))
    batch = libreyolo_ddp.resolve_autobatch(
        lambda: probe_training_batch(model, plan.imgsz, device, plan.cfg.amp, fraction=fraction),
        world_size=plan.world_size, nbs=plan.cfg.nbs)
    return plan.with_batch(batch)


MEMORY_FRACTION = 0.6
"""Share of the device's memory an eager training step is planned to reserve at its peak."""

GRAPH_POOL_SHARE = 0.25
"""Extra memory a captured training step holds, as a share of the eager step's peak.

A CUDA graph keeps its forward+backward tensors in a private pool for the whole run, which the
eager loss, optimizer and EMA cannot reuse; the acceptance bound for that overhead (graphed peak
<= 1.25x eager at the same batch) is what autobatch plans for. ``tools/bench_train_e2e.py``
prints the measured pool and peaks per arm to check the estimate."""


def memory_fraction(*, graphed: bool) -> float:
    """The share of device memory the probe may fill: smaller under ``cuda_graph=True`` so the
    graph pool fits on top of the probed (eager) step."""
    return MEMORY_FRACTION / (1.0 + GRAPH_POOL_SHARE) if graphed else MEMORY_FRACTION


def probe_training_batch(model: LibreYOLO, imgsz: int, device: torch.device, amp: bool, *,
                         fraction: float = MEMORY_FRACTION) -> int:
    """Images per step that fit on ``device`` for a forward+backward at ``imgsz`` within
    ``fraction`` of its memory."""
    net = model.net.to(device).train()

    def step(batch: int) -> None:
        images = torch.rand(batch, 3, imgsz, imgsz, device=device)
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            outputs = model.training_forward(images)
            if has_training_head(model.family):  # split capture: the eager head's memory counts too
                targets = model.family.sample_targets(batch, imgsz, torch.Generator().manual_seed(0))
                outputs = model.family.training_head(net, outputs, targets)
        sum(leaf.float().mean() for leaf in _leaves(outputs)).backward()  # type: ignore[union-attr]
        net.zero_grad(set_to_none=True)

    try:
        return libreyolo_ddp.probe_batch_size(step, device, fraction=fraction)
    finally:
        net.zero_grad(set_to_none=True)


def _leaves(tree: object) -> list[torch.Tensor]:
    if isinstance(tree, torch.Tensor):
        return [tree] if tree.is_floating_point() else []
    if isinstance(tree, dict):
        return [t for v in tree.values() for t in _leaves(v)]
    if isinstance(tree, list | tuple):
        return [t for v in tree for t in _leaves(v)]
    return []
