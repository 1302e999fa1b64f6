"""``batch=-1``: the one place the training batch is fitted to GPU memory.

Called by every rank before training: in one process it probes here; with a process group
(spawned workers or torchrun) rank 0 probes and broadcasts (``libreyolo_ddp.resolve_autobatch``).

The training images the data pipeline will keep on the device (``data.device_cache``) are asked
about here with the same rule the pipeline applies, and their bytes come out of the budget; the
memory its batch rendering holds beside the step (``tasks.detect.render_graph``) is held during each probed
step, since it grows with the batch.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch

import libreyolo_ddp

from ..contract.family import has_training_head
from ..data.cache_store import parse_cache_setting
from ..data.device_cache import may_be_resident, plan_residency
from ..data.loading import resolve_gpu_augment
from ..errors import ConfigError
from ..tensor_trees import tensor_leaves

if TYPE_CHECKING:
    from ..handle import ModelHandle
    from .plan import TrainPlan

log = logging.getLogger(__name__)


def resolve_batch(model: ModelHandle, plan: TrainPlan) -> TrainPlan:
    """``plan`` unchanged for a fixed batch, else with the global batch that fits."""
    if plan.global_batch != -1:
        return plan
    if plan.devices.type != "cuda":
        raise ConfigError("batch=-1 (fit the batch to GPU memory) needs a CUDA device; on "
                          f"{plan.devices.type} pass a fixed batch, e.g. batch=16")
    device = libreyolo_ddp.local_device() if libreyolo_ddp.dist_env().world_size > 1 else plan.devices.torch_device(0)

    def probe() -> int:  # rank 0 only under a process group: the others receive its batch
        resident = planned_resident_bytes(model, plan, device)
        share = resident / torch.cuda.get_device_properties(device).total_memory if resident else 0.0
        fraction = memory_fraction(graphed=bool(plan.cfg.cuda_graph), resident_share=share)
        return probe_training_batch(model, plan.imgsz, device, plan.cfg.amp, fraction=fraction,
                                    held_per_image=rendering_bytes_per_image(model, plan, device))

    batch = libreyolo_ddp.resolve_autobatch(probe, world_size=plan.world_size, nbs=plan.cfg.nbs)
    return plan.with_batch(batch)


def planned_resident_bytes(model: ModelHandle, plan: TrainPlan, device: torch.device) -> int:
    """Bytes of training images the data pipeline will keep on ``device`` (0: none), decided by
    ``device_cache.plan_residency`` as the pipeline decides it (it counts the training split)."""
    task = model.task_spec
    place = parse_cache_setting(plan.cfg.cache)
    gpu_augment = resolve_gpu_augment(plan.cfg.gpu_augment, device)
    if not task.images_on_device or not may_be_resident(place, device, gpu_augment=gpu_augment):
        return 0
    n_images = len(task.load_split(task.load_data(plan.cfg.data), "train"))
    residency = plan_residency(place, device, gpu_augment=gpu_augment, n_images=n_images, imgsz=plan.imgsz)
    if not residency.resident:
        return 0
    log.info("autobatch: planning around the training images kept on the device (%s)", residency.reason)
    return residency.nbytes


def rendering_bytes_per_image(model: ModelHandle, plan: TrainPlan, device: torch.device) -> int:
    """Device memory the data pipeline's batch rendering holds per batch image beside the training
    step (the task's ``rendering_bytes_per_pixel``), or 0 when the workers render on the CPU."""
    per_pixel = model.task_spec.rendering_bytes_per_pixel
    if not per_pixel or not resolve_gpu_augment(plan.cfg.gpu_augment, device):
        return 0
    return per_pixel * plan.imgsz * plan.imgsz


MEMORY_FRACTION = 0.6
"""Share of the device's memory an eager training step is planned to reserve at its peak."""

GRAPH_POOL_SHARE = 0.25
"""Extra memory a captured training step holds, as a share of the eager step's peak.

A CUDA graph keeps its forward+backward tensors in a private pool for the whole run, which the
eager loss, optimizer and EMA cannot reuse; the acceptance bound for that overhead (graphed peak
<= 1.25x eager at the same batch) is what autobatch plans for. ``tools/bench_train_e2e.py``
prints the measured pool and peaks per arm to check the estimate."""


MIN_PROBE_FRACTION = 0.05
"""Below this share of device memory left for the step, autobatch refuses rather than probe."""


def memory_fraction(*, graphed: bool, resident_share: float = 0.0) -> float:
    """The share of device memory the probe may fill.

    The training images kept on the device (``resident_share`` of its memory) come off the top;
    under ``cuda_graph=True`` what is left is divided so the graph pool fits on top of the probed
    (eager) step.

    Raises:
        ConfigError: the resident images leave less than :data:`MIN_PROBE_FRACTION` for the step.
    """
    fraction = (MEMORY_FRACTION - resident_share) / ((1.0 + GRAPH_POOL_SHARE) if graphed else 1.0)
    if fraction < MIN_PROBE_FRACTION:
        raise ConfigError(f"batch=-1: the training images kept on the GPU take {resident_share:.0%} of its memory, "
                          f"leaving {max(fraction, 0.0):.0%} for the training step (under {MIN_PROBE_FRACTION:.0%}); "
                          f"use cache='auto' (GPU only when the images fit) or cache='ram', or a fixed batch")
    return fraction


def probe_training_batch(model: ModelHandle, imgsz: int, device: torch.device, amp: bool, *,
                         fraction: float = MEMORY_FRACTION, held_per_image: int = 0) -> int:
    """Images per step that fit on ``device`` for a forward+backward at ``imgsz`` within
    ``fraction`` of its memory, with ``held_per_image`` bytes per image held beside each step."""
    net = model.net.to(device).train()

    def step(batch: int) -> None:
        held = hold_bytes(held_per_image * batch, device)  # noqa: F841 - alive for the step
        images = torch.rand(batch, 3, imgsz, imgsz, device=device)
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            outputs = model.training_forward(images)
            if has_training_head(model.family):  # split capture: the eager head's memory counts too
                targets = model.family.sample_targets(batch, imgsz, torch.Generator().manual_seed(0))
                outputs = model.family.training_head(net, outputs, targets)
        sum(leaf.float().mean() for leaf in tensor_leaves(outputs) if leaf.is_floating_point()).backward()  # type: ignore[union-attr]
        net.zero_grad(set_to_none=True)

    try:
        return libreyolo_ddp.probe_batch_size(step, device, fraction=fraction)
    finally:
        net.zero_grad(set_to_none=True)


def hold_bytes(nbytes: int, device: torch.device) -> torch.Tensor | None:
    """A block of ``nbytes`` on ``device`` (None for 0): memory something else holds meanwhile."""
    return torch.empty(nbytes, dtype=torch.uint8, device=device) if nbytes else None
