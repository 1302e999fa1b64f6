"""Model factories for the graph benchmarks' ``--extra`` hook (the model zoo's rows).

    python tools/bench_infer_graphs.py --extra bench_models:yolo9t_infer
    python tools/bench_infer_graphs.py --extra bench_models:yolo9t_infer_fused
    python tools/bench_train_graphs.py --extra bench_models:yolo9t_train
    python tools/bench_infer_graphs.py --extra bench_models:rtmdett_infer --extra bench_models:rtmdets_infer
    python tools/bench_train_graphs.py --extra bench_models:rtmdett_train --extra bench_models:rtmdets_train
"""

from __future__ import annotations

import torch
from torch import nn


def yolo9t_infer() -> tuple[str, nn.Module, int]:
    from libreyolo_models import LibreYOLO9

    torch.manual_seed(0)
    return "yolov9-t", LibreYOLO9(size="t").inference_module(), 640


def yolo9t_infer_fused() -> tuple[str, nn.Module, int]:
    """YOLOv9-t after ``fuse()``. BatchNorm statistics are set from one random batch first (the
    benchmark's own calibration finds no BatchNorm left to set)."""
    from libreyolo_models import LibreYOLO9

    torch.manual_seed(0)
    model = LibreYOLO9(size="t")
    norms = [m for m in model.net.modules() if isinstance(m, nn.BatchNorm2d)]
    for m in norms:
        m.momentum = 1.0
    model.net.train()
    with torch.no_grad():
        model.net(torch.randn(2, 3, 640, 640))
    return "yolov9-t fused", model.fuse().inference_module(), 640


def _zoo_train(family: str, label: str, size: str, device: torch.device, batch: int = 8, imgsz: int = 640):  # noqa: ANN202
    """A zoo model's training seam, a fixed batch with six boxes per image, and its family's loss."""
    from libreyolo_models import LibreYOLO, LossContext
    from libreyolo_models.layers.targets import random_box_targets

    torch.manual_seed(0)
    model = LibreYOLO(family=family, size=size)
    g = torch.Generator().manual_seed(0)
    images = torch.rand(batch, 3, imgsz, imgsz, generator=g).to(device)
    targets = random_box_targets(batch, model.nc, g, per_image=6)
    context = LossContext(gains=model.spec.task(model.task).loss_gains, global_batch=batch)

    def loss_fn(outputs, inputs):  # noqa: ANN001, ANN202, ARG001
        return model.family.compute_loss(outputs, targets, context).total

    return f"{label}-{size} (b{batch}, {imgsz}px)", model.training_module(), (images,), loss_fn


def yolo9t_train(device: torch.device):  # noqa: ANN201
    return _zoo_train("yolo9", "yolov9", "t", device)


def rtmdett_infer() -> tuple[str, nn.Module, int]:
    from libreyolo_models import LibreRTMDet

    torch.manual_seed(0)
    return "rtmdet-t", LibreRTMDet(size="t").inference_module(), 640


def rtmdets_infer() -> tuple[str, nn.Module, int]:
    from libreyolo_models import LibreRTMDet

    torch.manual_seed(0)
    return "rtmdet-s", LibreRTMDet(size="s").inference_module(), 640


def rtmdett_train(device: torch.device):  # noqa: ANN201
    return _zoo_train("rtmdet", "rtmdet", "t", device)


def rtmdets_train(device: torch.device):  # noqa: ANN201
    return _zoo_train("rtmdet", "rtmdet", "s", device)
