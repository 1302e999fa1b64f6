"""YOLO-NAS and PicoDet on two GPUs through ``model.train(device="0,1")``: spawned NCCL workers,
SyncBatchNorm on (the families' default), YOLO-NAS's frozen ``rbr_reparam`` convs (no gradient:
DDP must not wait for one), PicoDet's two normalisers in one all-reduce, and the caller holding the
best weights."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.multigpu


@pytest.mark.parametrize(("family", "losses"), [("yolonas", ("cls", "iou", "dfl")), ("picodet", ("cls", "box", "dfl"))])
def test_device_0_1_trains_for_an_epoch(tmp_path: Path, family: str, losses: tuple[str, ...]) -> None:
    from libreyolo_models import LibreYOLO

    model = LibreYOLO(family=family, size="s")
    assert model.spec.sync_bn_default and model.spec.ddp_autospawn
    outcome = model.train(data="shapes", epochs=1, imgsz=320, batch=32, device="0,1", project=str(tmp_path),
                          verbose=False, plots=False)
    ckpt = torch.load(outcome.best, weights_only=True)
    assert ckpt["world_size"] == 2 and ckpt["global_batch"] == 32 and ckpt["model_family"] == family
    assert all(math.isfinite(outcome.metrics[f"train/{name}_loss"]) for name in losses)
    assert outcome.metrics["train/cls_loss"] > 0
    best = LibreYOLO(outcome.best)
    for (k, a), (_, b) in zip(model.net.state_dict().items(), best.net.state_dict().items()):
        assert torch.equal(a.cpu(), b), k
    assert outcome.metrics.get("metrics/mAP50", -1) >= 0
