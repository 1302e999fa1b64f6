"""RTMDet on two GPUs through ``model.train(device="0,1")``: spawned NCCL workers, SyncBatchNorm on
(the family's default), the head's shared convs under DDP, and the caller holding the best weights."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.multigpu


def test_device_0_1_trains_rtmdet_s_on_shapes_for_an_epoch(tmp_path: Path) -> None:
    from libreyolo_models import LibreRTMDet, LibreYOLO

    model = LibreRTMDet(size="s")
    outcome = model.train(data="shapes", epochs=1, imgsz=320, batch=32, device="0,1", project=str(tmp_path),
                          verbose=False, plots=False)
    ckpt = torch.load(outcome.best, weights_only=True)
    assert ckpt["world_size"] == 2 and ckpt["global_batch"] == 32 and ckpt["model_family"] == "rtmdet"
    assert all(math.isfinite(outcome.metrics[k]) for k in ("train/cls_loss", "train/box_loss"))
    assert outcome.metrics["train/cls_loss"] > 0
    best = LibreYOLO(outcome.best)
    for (k, a), (_, b) in zip(model.net.state_dict().items(), best.net.state_dict().items()):
        assert torch.equal(a.cpu(), b), k
    head = best.net.head  # still one conv for the three levels after DDP, SyncBN and the EMA
    assert head.cls_convs[2][0].conv.weight is head.cls_convs[0][0].conv.weight
    assert torch.equal(ckpt["model"]["head.cls_convs.2.0.conv.weight"], ckpt["model"]["head.cls_convs.0.0.conv.weight"])
    assert outcome.metrics.get("metrics/mAP50", -1) >= 0
