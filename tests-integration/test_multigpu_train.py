"""Two GPUs through ``model.train(device="0,1")`` (spawned NCCL workers) and NCCL versions of the
issue-9 checks: an all-background rank and sharded validation."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).parent
pytestmark = pytest.mark.multigpu


def test_device_0_1_trains_yolo9s_on_shapes_and_the_caller_holds_the_best(tmp_path: Path) -> None:
    from libreyolo_models import LibreYOLO, LibreYOLO9

    model = LibreYOLO9(size="s")
    outcome = model.train(data="shapes", epochs=2, imgsz=320, batch=32, device="0,1", project=str(tmp_path),
                          verbose=False, plots=False)
    ckpt = torch.load(outcome.best, weights_only=True)
    assert ckpt["world_size"] == 2 and ckpt["global_batch"] == 32
    best = LibreYOLO(outcome.best)
    for (k, a), (_, b) in zip(model.net.state_dict().items(), best.net.state_dict().items()):
        assert torch.equal(a.cpu(), b), k
    assert outcome.metrics.get("metrics/mAP50", -1) >= 0


def test_all_background_rank_and_sharded_validation_under_nccl(tmp_path: Path, mini_shapes: Path) -> None:
    from libreyolo_ddp import parse_devices, spawn
    from libreyolo_models import LibreYOLO9

    sys.path.insert(0, str(HERE))
    import ddp_cpu_targets
    from test_ddp_cpu_trust import _one_labelled_image_set

    data = _one_labelled_image_set(tmp_path / "data")
    weights = LibreYOLO9(size="t", nc=1, names=["thing"]).save(tmp_path / "start.pt")
    result = spawn(ddp_cpu_targets.train_two_ranks_cuda, (str(weights), str(data), str(tmp_path / "runs")),
                   devices=parse_devices("0,1"), timeout_s=300)
    assert torch.load(result["best"], weights_only=True)["world_size"] == 2

    trained = ddp_cpu_targets.save_grid_model(str(tmp_path / "w.pt"))
    single = ddp_cpu_targets.validate_shard(trained, str(mini_shapes), 64, "train")
    sharded = spawn(ddp_cpu_targets.validate_shard, (trained, str(mini_shapes), 64, "train"),
                    devices=parse_devices("0,1"), timeout_s=300)
    assert sharded["n_images"] == single["n_images"] == 32 and single["metrics/mAP50"] > 0
    for key in ("metrics/mAP50", "metrics/mAP50-95"):
        assert sharded[key] == pytest.approx(single[key], abs=1e-6)


def test_device_0_1_trains_resnet18_on_shapes_cls_and_the_caller_holds_the_best(tmp_path: Path) -> None:
    from libreyolo_models import LibreYOLO

    model = LibreYOLO("LibreResNet18.yaml")
    outcome = model.train(data="shapes-cls", epochs=10, imgsz=64, batch=32, nbs=32, device="0,1", crop_min_area=0.35,
                          project=str(tmp_path), verbose=False, plots=False)
    ckpt = torch.load(outcome.best, weights_only=True)
    assert ckpt["world_size"] == 2 and ckpt["global_batch"] == 32 and ckpt["task"] == "classify"
    best = LibreYOLO(outcome.best)
    for (k, a), (_, b) in zip(model.net.state_dict().items(), best.net.state_dict().items()):
        assert torch.equal(a.cpu(), b), k
    assert outcome.metrics["metrics/accuracy_top1"] > 0.3, outcome.summary()  # above chance (0.2) after 10 epochs
    assert model.val(data="shapes-cls", imgsz=64, verbose=False).n_images == 182  # every val crop of shapes-cls
