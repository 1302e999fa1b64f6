"""Classifiers on a real GPU: graphed predict equals eager, the batched augmentation path on the
device matches the CPU path, and a short GPU training run learns.

The families' capture declarations stay False until their parity rows are green, so the graph
tests allow capture on their model's own copy of the declaration (``_allow_capture``); they check
what a green row will switch on.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from libreyolo_models import SAMPLE_IMAGE, LibreYOLO

pytestmark = pytest.mark.cuda

SMALLEST = [("resnet", "18"), ("efficientnetv2", "b0"), ("convnext", "tiny"), ("mobilenetv4", "small")]


def _allow_capture(model: LibreYOLO) -> LibreYOLO:
    decl = model.spec.task(model.task)
    model.spec = replace(model.spec, tasks={model.task: replace(decl, inference_capture=True)})
    return model


def _calibrated(family: str, size: str) -> LibreYOLO:
    """Random weights with BatchNorm statistics from two batches, so fp16 stays finite."""
    torch.manual_seed(0)
    model = LibreYOLO(family=family, size=size, nc=10).to(0)
    model.net.train()
    with torch.no_grad():
        for seed in (0, 1):
            model.net(torch.rand(4, 3, 224, 224, generator=torch.Generator().manual_seed(seed)).to(0))
    model.net.eval()
    return _allow_capture(model)


@pytest.mark.parametrize(("family", "size"), SMALLEST)
def test_graphed_predict_probabilities_equal_eager(family: str, size: str) -> None:
    model = _calibrated(family, size)
    with Image.open(SAMPLE_IMAGE) as im:
        mirrored = np.ascontiguousarray(np.asarray(im.convert("RGB"))[:, ::-1])
    sources = [SAMPLE_IMAGE, mirrored]
    eager = model(sources)
    first = model(sources, cuda_graph=True)    # captures
    second = model(sources, cuda_graph=True)   # replays
    for e, a, b in zip(eager, first, second):
        assert torch.equal(e.probs.data, a.probs.data) and torch.equal(e.probs.data, b.probs.data)
    assert not torch.equal(eager[0].probs.data, eager[1].probs.data)  # the two inputs tell apart
    info = model.graph_info()
    assert len(info["graphs"]) == 1 and info["graphs"][0]["replays"] >= 3


@pytest.mark.parametrize(("family", "size"), SMALLEST)
def test_graphed_fp16_batch_of_four_equals_eager(family: str, size: str) -> None:
    model = _calibrated(family, size).half()
    model.capture_graph(batch=4)
    x = torch.rand(4, 3, 224, 224, device="cuda", dtype=torch.float16)
    runner = model.graphs.inference
    with torch.inference_mode():
        assert torch.equal(runner(x), model.inference_forward(x))


def test_batched_augmentation_on_the_gpu_matches_the_cpu_path(mini_shapes_cls: Path, tmp_path: Path) -> None:
    from libreyolo_models.tasks.classify.augment import ClassifyAugment
    from libreyolo_models.tasks.classify.folder_reader import load_class_split
    from libreyolo_models.tasks.classify.pipeline import ClassifyTrainPipeline

    split = load_class_split(mini_shapes_cls, "train")
    runs = {}
    for device, batched in (("cpu", False), ("cuda", True)):
        pipe = ClassifyTrainPipeline(split, imgsz=64, batch_size=8, device=device, augment=ClassifyAugment(hsv_h=0.05),
                                     workers=2, seed=3, gpu_augment=batched, cache="disk", cache_dir=tmp_path)
        pipe.set_epoch(0)
        runs[device] = [(b.images.cpu(), b.targets.cpu(), b.paths) for b in pipe]
    for (a, ta, pa), (b, tb, pb) in zip(runs["cpu"], runs["cuda"]):
        assert pa == pb and torch.equal(ta, tb)
        assert float(((a - b).abs() <= 1.0 / 255).float().mean()) > 0.999


def test_resnet18_trains_on_the_gpu_with_batched_augmentation(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = LibreYOLO("LibreResNet18.yaml")
    outcome = model.train(data="shapes-cls", epochs=40, imgsz=64, batch=32, nbs=32, device=0, workers=4,
                          crop_min_area=0.35, project=str(tmp_path), verbose=False, plots=False, val=False)
    assert outcome.metrics["metrics/accuracy_top1"] >= 0.8, outcome.summary()
