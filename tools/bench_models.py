"""Model factories for the graph benchmarks' ``--extra`` hook (the model zoo's rows).

    python tools/bench_infer_graphs.py --extra bench_models:yolo9t_infer
    python tools/bench_infer_graphs.py --extra bench_models:yolo9t_infer_fused
    python tools/bench_train_graphs.py --extra bench_models:yolo9t_train
    python tools/bench_infer_graphs.py --extra bench_models:yoloxs_infer --extra bench_models:yoloxn_infer
    python tools/bench_train_graphs.py --extra bench_models:yoloxs_train
    python tools/bench_infer_graphs.py --extra bench_models:segformer_b0_infer
    python tools/bench_train_graphs.py --extra bench_models:segformer_b0_train
    python tools/bench_infer_graphs.py --batches 1,2,8 --extra bench_models:rtdetr_r18_infer
    python tools/bench_train_graphs.py --extra bench_models:rtdetr_r18_train
    python tools/bench_infer_graphs.py --extra bench_models:rtmdett_infer --extra bench_models:rtmdets_infer
    python tools/bench_infer_graphs.py --extra bench_models:rtmdets_infer_fused
    python tools/bench_train_graphs.py --extra bench_models:rtmdett_train --extra bench_models:rtmdets_train
    python tools/bench_infer_graphs.py --extra bench_models:resnet50_infer --extra bench_models:efficientnetv2b0_infer \
        --extra bench_models:convnexttiny_infer --extra bench_models:mobilenetv4small_infer
    python tools/bench_train_graphs.py --extra bench_models:resnet50_train --extra bench_models:efficientnetv2b0_train \
        --extra bench_models:convnexttiny_train --extra bench_models:mobilenetv4small_train
"""

from __future__ import annotations

from typing import Any

import torch
from factories import InferCase, TrainCase
from torch import Tensor, nn


def _infer(family: str, size: str, label: str, imgsz: int = 640) -> InferCase:
    from libreyolo_models import LibreYOLO

    torch.manual_seed(0)
    return label, LibreYOLO(family=family, size=size).inference_module(), imgsz


def _infer_fused(family: str, size: str, label: str, imgsz: int = 640) -> InferCase:
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
    model.fuse()  # the fused inference copy; model.net itself stays unfused
    return label, model.inference_module(model.fused_net()), imgsz


def _train(family: str, size: str, label: str, device: torch.device, batch: int = 8, imgsz: int = 640) -> TrainCase:
    from libreyolo_models import LibreYOLO, LossContext
    from libreyolo_models.layers.targets import random_box_targets

    torch.manual_seed(0)
    model = LibreYOLO(family=family, size=size)
    g = torch.Generator().manual_seed(0)
    images = torch.rand(batch, 3, imgsz, imgsz, generator=g).to(device)
    targets = random_box_targets(batch, model.nc, g, per_image=6)
    context = LossContext(gains=model.spec.task(model.task).loss_gains, global_batch=batch)

    def loss_fn(outputs: Any, inputs: tuple[Tensor, ...]) -> Tensor:  # noqa: ARG001 - outputs: the family's tree
        return model.family.compute_loss(outputs, targets, context).total

    return f"{label} (b{batch}, {imgsz}px)", model.training_module(), (images,), loss_fn


def yolo9t_infer() -> InferCase:
    return _infer("yolo9", "t", "yolov9-t")


def yolo9t_infer_fused() -> InferCase:
    return _infer_fused("yolo9", "t", "yolov9-t fused")


def yolo9t_train(device: torch.device) -> TrainCase:
    return _train("yolo9", "t", "yolov9-t", device)


def yoloxn_infer() -> InferCase:
    return _infer("yolox", "n", "yolox-n", imgsz=416)  # n and t are served at 416, as upstream


def yoloxs_infer() -> InferCase:
    return _infer("yolox", "s", "yolox-s")


def yoloxs_infer_fused() -> InferCase:
    return _infer_fused("yolox", "s", "yolox-s fused")


def yoloxs_train(device: torch.device) -> TrainCase:
    """YOLOX-s forward + backward; the loss (SimOTA) stays eager. Epoch 0: the L1 term is off."""
    return _train("yolox", "s", "yolox-s", device)


def segformer_b0_infer() -> InferCase:
    """SegFormer-b0's inference seam (logits, bilinear upsampling and arg-max) at 512 px, ADE20K's
    150 classes."""
    from libreyolo_models import LibreSegFormer

    torch.manual_seed(0)
    return "segformer-b0", LibreSegFormer(size="b0", nc=150).inference_module(), 512


def segformer_b0_train(device: torch.device, batch: int = 8, imgsz: int = 512) -> TrainCase:
    """SegFormer-b0's training seam at batch 8, 512 px, with its eager pixel cross-entropy (drop path
    and dropout active: their draws come from the graph's own RNG stream when captured)."""
    from libreyolo_models import LibreSegFormer, LossContext

    torch.manual_seed(0)
    model = LibreSegFormer(size="b0", nc=150)
    g = torch.Generator().manual_seed(0)
    images = torch.rand(batch, 3, imgsz, imgsz, generator=g).to(device)
    masks = model.family.sample_targets(batch, imgsz, g).to(device)
    context = LossContext(gains=model.spec.task(model.task).loss_gains, global_batch=batch)

    def loss_fn(outputs: Any, inputs: tuple[Tensor, ...]) -> Tensor:  # noqa: ARG001 - outputs: the family's tree
        return model.family.compute_loss(outputs, masks, context).total

    return f"segformer-b0 (b{batch}, {imgsz}px)", model.training_module(), (images,), loss_fn


def rtdetr_r18_infer() -> InferCase:
    """RT-DETR r18's whole inference network (no denoising at inference: it captures whole)."""
    from libreyolo_models import LibreRTDETR

    torch.manual_seed(0)
    return "rt-detr-r18", LibreRTDETR(size="r18").inference_module(), 640


def rtdetr_r18_train(device: torch.device, batch: int = 8, imgsz: int = 640) -> TrainCase:
    """Split capture: the module is the prefix (backbone + encoder) the graph holds; the loss runs
    the decoder with this batch's denoising queries on the same network, eagerly, then matching
    and the terms. Seeded, so each arm's call builds the same model with its own closure."""
    from libreyolo_models import LibreRTDETR, LossContext
    from libreyolo_models.layers.targets import random_box_targets

    torch.manual_seed(0)
    model = LibreRTDETR(size="r18")
    g = torch.Generator().manual_seed(0)
    images = torch.rand(batch, 3, imgsz, imgsz, generator=g).to(device)
    targets = random_box_targets(batch, model.nc, g, per_image=6)
    context = LossContext(gains=model.spec.task(model.task).loss_gains, global_batch=batch)

    def loss_fn(outputs: Any, inputs: tuple[Tensor, ...]) -> Tensor:  # noqa: ARG001 - outputs: the family's tree
        head = model.family.training_head(model.net, outputs, targets)
        return model.family.compute_loss(head, targets, context).total

    return f"rt-detr-r18 split (b{batch}, {imgsz}px)", model.training_module(), (images,), loss_fn


def rtmdett_infer() -> InferCase:
    return _infer("rtmdet", "t", "rtmdet-t")


def rtmdets_infer() -> InferCase:
    return _infer("rtmdet", "s", "rtmdet-s")


def rtmdets_infer_fused() -> InferCase:
    return _infer_fused("rtmdet", "s", "rtmdet-s fused")


def rtmdett_train(device: torch.device) -> TrainCase:
    """RTMDet-t forward + backward; the loss (dynamic soft-label assigner, QFL + GIoU) stays eager."""
    return _train("rtmdet", "t", "rtmdet-t", device)


def rtmdets_train(device: torch.device) -> TrainCase:
    return _train("rtmdet", "s", "rtmdet-s", device)

# Classifiers (random weights, 1000 classes): inference rows at 224 px through the shared ``_infer``,
# training rows at batch 32 with class-index targets (``_train`` draws boxes, a detector's targets).
# The benchmarks' own BatchNorm calibration runs on these modules (ConvNeXt has LayerNorm only).
CLASSIFIERS = {"resnet50": ("resnet", "50"), "efficientnetv2b0": ("efficientnetv2", "b0"),
               "convnexttiny": ("convnext", "tiny"), "mobilenetv4small": ("mobilenetv4", "small")}


def _classifier_train(key: str, device: torch.device, batch: int = 32, imgsz: int = 224) -> TrainCase:
    from libreyolo_models import LibreYOLO, LossContext

    family, size = CLASSIFIERS[key]
    torch.manual_seed(0)
    model = LibreYOLO(family=family, size=size)
    g = torch.Generator().manual_seed(0)
    images = torch.rand(batch, 3, imgsz, imgsz, generator=g).to(device)
    targets = model.family.sample_targets(batch, imgsz, g).to(device)
    context = LossContext(gains=model.spec.task(model.task).loss_gains, global_batch=batch)

    def loss_fn(outputs: Any, inputs: tuple[Tensor, ...]) -> Tensor:  # noqa: ARG001 - outputs: the family's tree
        return model.family.compute_loss(outputs, targets, context).total

    return f"{key} (b{batch}, {imgsz}px)", model.training_module(), (images,), loss_fn


def resnet50_infer() -> InferCase:
    return _infer("resnet", "50", "resnet50", imgsz=224)


def efficientnetv2b0_infer() -> InferCase:
    return _infer("efficientnetv2", "b0", "efficientnetv2b0", imgsz=224)


def convnexttiny_infer() -> InferCase:
    return _infer("convnext", "tiny", "convnexttiny", imgsz=224)


def mobilenetv4small_infer() -> InferCase:
    return _infer("mobilenetv4", "small", "mobilenetv4small", imgsz=224)


def resnet50_train(device: torch.device) -> TrainCase:
    return _classifier_train("resnet50", device)


def efficientnetv2b0_train(device: torch.device) -> TrainCase:
    return _classifier_train("efficientnetv2b0", device)


def convnexttiny_train(device: torch.device) -> TrainCase:
    return _classifier_train("convnexttiny", device)


def mobilenetv4small_train(device: torch.device) -> TrainCase:
    return _classifier_train("mobilenetv4small", device)
