"""The one-GPU speed levers of training compute what the plain code computed, and the small-data
recipe gives a short run on a small set enough optimizer steps (issue 21)."""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

import libreyolo_ddp
from libreyolo_models import LibreYOLO9
from libreyolo_models.train import autobatch
from libreyolo_models.train.callbacks import TrainStart
from libreyolo_models.train.ema import ModelEMA
from libreyolo_models.train.optim import build_optimizer
from libreyolo_models.train.plan import TrainPlan
from libreyolo_models.train.schedule import accumulate_steps, nominal_accumulation, warmup_iterations
from libreyolo_models.train.settings import TrainConfig
from libreyolo_models.train.trainer import Trainer


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.SiLU(), nn.Conv2d(8, 4, 1))


def _groups(net: nn.Module) -> list[dict]:
    decay = [p for n, p in net.named_parameters() if n.endswith("weight") and p.dim() > 1]
    rest = [p for n, p in net.named_parameters() if not (n.endswith("weight") and p.dim() > 1)]
    return [{"params": decay, "weight_decay": 5e-4}, {"params": rest, "weight_decay": 0.0}]


def _train_steps(net: nn.Module, opt: torch.optim.Optimizer, steps: int = 4) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        images = torch.rand(2, 3, 12, 12, generator=gen)
        net(images).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return [p.detach().clone() for p in net.parameters()]


def test_ema_multi_tensor_update_is_bit_identical_to_a_per_tensor_lerp() -> None:
    net = _net()
    ema = ModelEMA(net, decay=0.9, tau=3.0)
    reference = copy.deepcopy(ema.ema)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for step in range(1, 4):
        _train_steps(net, opt, steps=1)  # also moves BatchNorm's running statistics
        ema.update(net)
        d = 0.9 * (1 - math.exp(-step / 3.0))
        with torch.no_grad():
            for ref, src in zip(reference.state_dict().values(), net.state_dict().values()):
                ref.lerp_(src, 1.0 - d) if ref.dtype.is_floating_point else ref.copy_(src)
    ours, ref = ema.ema.state_dict(), reference.state_dict()
    assert ours["1.num_batches_tracked"].item() == 3
    assert all(torch.equal(ours[k], ref[k]) for k in ref), [k for k in ref if not torch.equal(ours[k], ref[k])]


def test_warmup_floor_is_capped_to_a_share_of_a_short_run() -> None:
    # 400 images at batch 32 (13 batches), 10 epochs: the 100-iteration floor took 100 of 130.
    assert warmup_iterations(3.0, 13, epochs=10) == 39
    assert warmup_iterations(1.0, 13, epochs=10) == 39  # the floor, now 30 % of the run
    assert warmup_iterations(3.0, 13) == 100  # without the run length: the old floor
    assert warmup_iterations(3.0, 13, epochs=4) == 39  # an explicit warmup longer than 30 % is kept
    assert warmup_iterations(3.0, 7330, epochs=300) == 21990  # COCO-sized: unchanged
    assert warmup_iterations(0.0, 13, epochs=10) == 0
    assert warmup_iterations(0.1, 2, epochs=1) == 1


def test_nominal_batch_never_leaves_an_epoch_with_few_optimizer_steps() -> None:
    assert nominal_accumulation(64, 32, 13) == 1  # shapes at batch 32: every batch a step
    assert nominal_accumulation(64, 8, 50) == 3  # 50 batches: 16 steps, not 6
    assert nominal_accumulation(64, 16, 7330) == 4  # large sets keep nbs / batch
    assert nominal_accumulation(64, 16) == 4
    assert nominal_accumulation(16, 32, 1) == 1
    assert accumulate_steps(200, 39, nbs=64, batch=32, batches_per_epoch=13) == 1
    assert accumulate_steps(200, 100, nbs=64, batch=16) == 4


def test_small_set_run_steps_every_batch_after_a_capped_warmup(mini_shapes, tmp_path) -> None:
    """24 images at batch 8 for 2 epochs: 6 iterations, each an optimizer step (nbs 64 once
    accumulated 8 to 1); the last epoch's learning rate has left warmup (the old 100-iteration
    floor kept every one of the 6 iterations in warmup)."""
    model = LibreYOLO9(size="t")
    starts: list[TrainStart] = []
    outcome = model.train(data=str(mini_shapes), project=str(tmp_path), imgsz=64, batch=8, epochs=2, workers=0,
                          close_mosaic=0, val=False, plots=False, verbose=False, optimizer="SGD", lr0=0.01,
                          warmup_epochs=0.5, lrf=0.5, cos_lr=False, profile=True,
                          callbacks=[lambda e: starts.append(e) if isinstance(e, TrainStart) else None])
    row = outcome.metrics
    # Where the time before the first step went: every setup phase, timed, in order.
    assert list(starts[0].setup_s) == list(Trainer.SETUP_PHASES)
    assert all(v >= 0 for v in starts[0].setup_s.values())
    # warmup: max(0.5 * 3, min(100, 0.3 * 6)) = 2 iterations; epoch 2's lr is the schedule's
    assert row["lr/pg0"] == pytest.approx(0.01 * (1 - 0.5 * 0.5), rel=1e-9)
    # The profile counts the epoch's 3 steps and times the EMA and logging apart from the optimizer.
    assert row["profile/steps"] == 3
    assert row["profile/optimizer_s"] > 0 and row["profile/ema_s"] > 0 and "profile/log_s" in row
    assert 0 < row["train/first_step_s"] <= row["train/epoch_s"]
    assert 0 <= row["train/first_data_s"] <= row["train/first_step_s"]
    # The final epoch validates (val=False still checks the last one) and writes its checkpoints.
    assert row["time/val_s"] > 0 and row["time/save_s"] > 0


def _fake_plan(graph: bool) -> TrainPlan:
    devices = SimpleNamespace(type="cuda", torch_device=lambda index: torch.device("cpu"))
    cfg = TrainConfig(data="shapes", batch=-1, cuda_graph=graph)
    return TrainPlan(cfg, devices, 64, {}, False, 1)  # type: ignore[arg-type]


def test_autobatch_leaves_room_for_the_graph_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake device of 80 GiB whose step reserves 2 GiB + 1 GiB per image: eager plans 60 %
    (46 images); graphed plans the pool's 25 % on top and still ends within 60 %."""
    gib, total, fixed, per_image = 2**30, 80, 2, 1
    seen: list[float] = []

    def fake_probe(step, device, fraction=0.6):  # noqa: ANN001, ANN202 - libreyolo_ddp's signature
        seen.append(fraction)
        return int((fraction * total * gib - fixed * gib) // (per_image * gib))

    monkeypatch.setattr(libreyolo_ddp, "probe_batch_size", fake_probe)
    model = LibreYOLO9(size="t")
    eager = autobatch.resolve_batch(model, _fake_plan(graph=False)).global_batch
    graphed = autobatch.resolve_batch(model, _fake_plan(graph=True)).global_batch
    assert seen == [0.6, pytest.approx(0.48)]
    assert (eager, graphed) == (46, 36)
    assert (fixed + graphed * per_image) * (1 + autobatch.GRAPH_POOL_SHARE) <= 0.6 * total


@pytest.mark.cuda
def test_a_cuda_training_step_never_waits_for_the_gpu() -> None:
    """After the first step (cuDNN setup, lazy state), forward, loss, backward, the fused
    optimizer behind GradScaler and the EMA run without one host sync (sync debug mode errors)."""
    from libreyolo_models.contract.family import LossContext
    from libreyolo_models.train.step import StepTimer, TrainStep

    device = torch.device("cuda", 0)
    model = LibreYOLO9(size="t")
    net = model.net.to(device).train()
    cfg = TrainConfig(data="shapes", optimizer="SGD", lr0=0.01)
    opt = build_optimizer(model.family.parameter_groups(net, weight_decay=5e-4), cfg, iterations=100)
    scaler = torch.amp.GradScaler("cuda")
    decl = model.spec.task(model.task)
    step = TrainStep(model.family, model.training_module(), net, opt, scaler, ModelEMA(net), amp=True,
                     device=device, context=LossContext(gains=dict(decl.loss_gains), global_batch=4),
                     max_grad_norm=10.0, timer=StepTimer(False, device))
    gen = torch.Generator().manual_seed(0)
    images = torch.rand(4, 3, 128, 128, device=device)
    targets = model.family.sample_targets(4, 128, gen)
    sums = step.forward_backward(images, targets)
    step.optimizer_step()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(2):
            sums = sums + step.forward_backward(images, targets)
            step.optimizer_step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.isfinite(sums).all()
