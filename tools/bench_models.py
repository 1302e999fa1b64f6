"""Model factories for the graph benchmarks' ``--extra`` hook (the model zoo's rows).

    python tools/bench_infer_graphs.py --extra bench_models:yolo9t_infer
    python tools/bench_infer_graphs.py --extra bench_models:yolo9t_infer_fused
    python tools/bench_train_graphs.py --extra bench_models:yolo9t_train
    python tools/bench_infer_graphs.py --extra bench_models:yoloxs_infer --extra bench_models:yoloxn_infer
    python tools/bench_train_graphs.py --extra bench_models:yoloxs_train
"""

from __future__ import annotations

import torch
from torch import nn


def _infer(family: str, size: str, label: str, imgsz: int = 640) -> tuple[str, nn.Module, int]:
    from libreyolo_models import LibreYOLO

    torch.manual_seed(0)
    return label, LibreYOLO(family=family, size=size).inference_module(), imgsz


def _infer_fused(family: str, size: str, label: str, imgsz: int = 640) -> tuple[str, nn.Module, int]:
    """After ``fuse()``. BatchNorm statistics are set from one random batch first (the benchmark's
    own calibration finds no BatchNorm left to set)."""
    from libreyolo_models import LibreYOLO

    torch.manual_seed(0)
    model = LibreYOLO(family=family, size=size)
    norms = [m for m in model.net.modules() if isinstance(m, nn.BatchNorm2d)]
    for m in norms:
        m.momentum = 1.0
    model.net.train()
    with torch.no_grad():
        model.net(torch.randn(2, 3, imgsz, imgsz))
    return label, model.fuse().inference_module(), imgsz


def _train(family: str, size: str, label: str, device: torch.device, batch: int = 8, imgsz: int = 640):  # noqa: ANN202
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

    return f"{label} (b{batch}, {imgsz}px)", model.training_module(), (images,), loss_fn


def yolo9t_infer() -> tuple[str, nn.Module, int]:
    return _infer("yolo9", "t", "yolov9-t")


def yolo9t_infer_fused() -> tuple[str, nn.Module, int]:
    return _infer_fused("yolo9", "t", "yolov9-t fused")


def yolo9t_train(device: torch.device):  # noqa: ANN201
    return _train("yolo9", "t", "yolov9-t", device)


def yoloxn_infer() -> tuple[str, nn.Module, int]:
    return _infer("yolox", "n", "yolox-n", imgsz=416)  # n and t are served at 416, as upstream


def yoloxs_infer() -> tuple[str, nn.Module, int]:
    return _infer("yolox", "s", "yolox-s")


def yoloxs_infer_fused() -> tuple[str, nn.Module, int]:
    return _infer_fused("yolox", "s", "yolox-s fused")


def yoloxs_train(device: torch.device):  # noqa: ANN201
    """YOLOX-s forward + backward; the loss (SimOTA) stays eager. Epoch 0: the L1 term is off."""
    return _train("yolox", "s", "yolox-s", device)
