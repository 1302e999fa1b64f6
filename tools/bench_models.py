"""Model factories for the graph benchmarks' ``--extra`` hook (the model zoo's rows).

    python tools/bench_infer_graphs.py --extra bench_models:yolo9t_infer
    python tools/bench_infer_graphs.py --extra bench_models:yolo9t_infer_fused
    python tools/bench_train_graphs.py --extra bench_models:yolo9t_train
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


def _yolo9_train(size: str, device: torch.device, batch: int = 8, imgsz: int = 640):  # noqa: ANN202
    from libreyolo_models import LibreYOLO9, LossContext
    from libreyolo_models.layers.targets import random_box_targets

    torch.manual_seed(0)
    model = LibreYOLO9(size=size)
    g = torch.Generator().manual_seed(0)
    images = torch.rand(batch, 3, imgsz, imgsz, generator=g).to(device)
    targets = random_box_targets(batch, model.nc, g, per_image=6)
    context = LossContext(gains=model.spec.task(model.task).loss_gains, global_batch=batch)

    def loss_fn(outputs, inputs):  # noqa: ANN001, ANN202, ARG001
        return model.family.compute_loss(outputs, targets, context).total

    return f"yolov9-{size} (b{batch}, {imgsz}px)", model.training_module(), (images,), loss_fn


def yolo9t_train(device: torch.device):  # noqa: ANN201
    return _yolo9_train("t", device)


# Classifiers (random weights, 1000 classes): inference rows at 224 px, training rows at batch 32.
# The benchmarks' own BatchNorm calibration runs on these modules (ConvNeXt has LayerNorm only).
#     python tools/bench_infer_graphs.py --extra bench_models:resnet50_infer --extra bench_models:efficientnetv2b0_infer \
#         --extra bench_models:convnexttiny_infer --extra bench_models:mobilenetv4small_infer
#     python tools/bench_train_graphs.py --no-resnet18 --extra bench_models:resnet50_train ...
CLASSIFIERS = {"resnet50": ("resnet", "50"), "efficientnetv2b0": ("efficientnetv2", "b0"),
               "convnexttiny": ("convnext", "tiny"), "mobilenetv4small": ("mobilenetv4", "small")}


def _classifier(key: str):  # noqa: ANN202
    from libreyolo_models import LibreYOLO

    family, size = CLASSIFIERS[key]
    torch.manual_seed(0)
    return LibreYOLO(family=family, size=size)


def _classifier_infer(key: str) -> tuple[str, nn.Module, int]:
    return key, _classifier(key).inference_module(), 224


def _classifier_train(key: str, device: torch.device, batch: int = 32, imgsz: int = 224):  # noqa: ANN202
    from libreyolo_models import LossContext

    model = _classifier(key)
    g = torch.Generator().manual_seed(0)
    images = torch.rand(batch, 3, imgsz, imgsz, generator=g).to(device)
    targets = model.family.sample_targets(batch, imgsz, g).to(device)
    context = LossContext(gains=model.spec.task(model.task).loss_gains, global_batch=batch)

    def loss_fn(outputs, inputs):  # noqa: ANN001, ANN202, ARG001
        return model.family.compute_loss(outputs, targets, context).total

    return f"{key} (b{batch}, {imgsz}px)", model.training_module(), (images,), loss_fn


def resnet50_infer() -> tuple[str, nn.Module, int]:
    return _classifier_infer("resnet50")


def efficientnetv2b0_infer() -> tuple[str, nn.Module, int]:
    return _classifier_infer("efficientnetv2b0")


def convnexttiny_infer() -> tuple[str, nn.Module, int]:
    return _classifier_infer("convnexttiny")


def mobilenetv4small_infer() -> tuple[str, nn.Module, int]:
    return _classifier_infer("mobilenetv4small")


def resnet50_train(device: torch.device):  # noqa: ANN201
    return _classifier_train("resnet50", device)


def efficientnetv2b0_train(device: torch.device):  # noqa: ANN201
    return _classifier_train("efficientnetv2b0", device)


def convnexttiny_train(device: torch.device):  # noqa: ANN201
    return _classifier_train("convnexttiny", device)


def mobilenetv4small_train(device: torch.device):  # noqa: ANN201
    return _classifier_train("mobilenetv4small", device)
