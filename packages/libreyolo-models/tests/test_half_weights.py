"""fp16 (here bf16, CPU autocast's) weight copies kept across steps: the same parameters and losses
bit for bit as autocast casting every weight on every forward, with a cast fewer per weight."""

from __future__ import annotations

import contextlib
import csv
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from op_counts import OpCounter
from torch import nn

from libreyolo_models import LibreYOLO, LibreYOLO9
from libreyolo_models.contract.family import has_training_head
from libreyolo_models.tensor_trees import tensor_leaves
from libreyolo_models.train import half_weights
from libreyolo_models.train.half_weights import HalfWeights
from libreyolo_models.zoo.registry import families

SMALL = {"yolox": ("n", 64), "resnet": ("18", 32), "mobilenetv4": ("small", 32), "efficientnetv2": ("b0", 32),
         "convnext": ("tiny", 32), "segformer": ("b0", 64)}
"""Each family that declares ``half_weights`` besides YOLOv9 (tested above with op counts), at a
small size and image size for the bit-for-bit check."""


def _forward(model: Any, net: nn.Module, x: torch.Tensor, step: int) -> Any:
    """The training forward as the trainer runs it: the family's seam, then its eager head if any."""
    outputs = model.family.training_forward(net, x)
    if has_training_head(model.family):
        targets = model.family.sample_targets(x.shape[0], x.shape[-1], torch.Generator().manual_seed(step))
        outputs = model.family.training_head(net, outputs, targets)
    return outputs


def _train(half: bool, *, family: str = "yolo9", size: str = "t", imgsz: int = 64, steps: int = 3, micro: int = 2,
           channels_last: bool = False, device: str = "cpu") -> tuple[list[float], nn.Module, Counter[str]]:
    """``steps`` SGD steps of a training forward under autocast with its cache off (as the trainer
    runs CUDA's): bf16 on the CPU, fp16 on CUDA; ``micro`` accumulated micro-batches each."""
    torch.manual_seed(0)
    model = LibreYOLO(family=family, size=size, nc=3, imgsz=imgsz)
    net = model.net.to(device).train()
    if channels_last:
        net.to(memory_format=torch.channels_last)
    dtype = torch.float16 if device != "cpu" else torch.bfloat16
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    copies = HalfWeights(net, dtype) if half else None
    g = torch.Generator().manual_seed(1)
    losses: list[float] = []
    ops: Counter[str] = Counter()
    for step in range(steps):
        for _ in range(micro):
            x = torch.rand(2, 3, imgsz, imgsz, generator=g).to(device)
            with torch.autocast(torch.device(device).type, dtype=dtype, cache_enabled=False):
                counter = OpCounter() if step == 0 else contextlib.nullcontext()
                with counter, copies.installed() if copies is not None else contextlib.nullcontext():
                    outputs = _forward(model, net, x, step)
                if isinstance(counter, OpCounter):
                    ops = counter.seen
                loss = sum(o.float().square().mean() for o in tensor_leaves(outputs) if o.is_floating_point())
            loss.backward()
            if copies is not None:
                copies.grads_to_masters()
            losses.append(loss.item())
        opt.step()
        opt.zero_grad(set_to_none=True)
        if copies is not None:
            copies.refresh()
    return losses, net, ops


def _assert_same_training(family: str, size: str, imgsz: int, device: str = "cpu") -> None:
    ref_losses, ref_net, _ = _train(False, family=family, size=size, imgsz=imgsz, steps=2, device=device)
    losses, net, _ = _train(True, family=family, size=size, imgsz=imgsz, steps=2, device=device)
    assert all(map(math.isfinite, ref_losses)), ref_losses  # else both sides would compare NaN to NaN
    assert losses == ref_losses
    for (name, a), b in zip(ref_net.state_dict().items(), net.state_dict().values()):
        assert torch.equal(a, b), name


def _calls_per_layer(family: str, size: str, imgsz: int) -> Counter[str]:
    """How many times each convolution and linear layer runs in one training forward."""
    model = LibreYOLO(family=family, size=size, nc=3, imgsz=imgsz)
    net = model.net.train()
    names = {id(m): name for name, m in net.named_modules()}
    calls: Counter[str] = Counter()
    hooks = [m.register_forward_hook(lambda m, i, o: calls.update([names[id(m)]]))
             for m in net.modules() if isinstance(m, half_weights.CAST_MODULES)]
    _forward(model, net, torch.rand(2, 3, imgsz, imgsz), 0)
    for hook in hooks:
        hook.remove()
    return calls


@pytest.mark.parametrize("channels_last", [False, True])
def test_weight_copies_train_bit_identically_with_a_cast_fewer_per_weight(channels_last: bool) -> None:
    ref_losses, ref_net, ref_ops = _train(False, channels_last=channels_last)
    losses, net, ops = _train(True, channels_last=channels_last)
    assert losses == ref_losses
    for (name, a), b in zip(ref_net.state_dict().items(), net.state_dict().values()):
        assert torch.equal(a, b), name
    copies = HalfWeights(net, torch.bfloat16)
    convs = [m for m in net.modules() if isinstance(m, nn.Conv2d)]
    assert len(copies) == len(convs) + sum(m.bias is not None for m in convs)  # weights, and the head's biases
    assert ref_ops["aten._to_copy"] - ops["aten._to_copy"] == len(copies)  # autocast has nothing left to cast
    assert all(p.dtype == torch.float32 for p in net.parameters())  # the masters are back after each forward
    if channels_last:
        conv = next(p for p in net.parameters() if p.dim() == 4 and p.shape[-1] > 1)
        twin = next(h for m, h in zip(copies.masters, copies.halves) if m is conv)
        assert twin.is_contiguous(memory_format=torch.channels_last) and not twin.is_contiguous()


def test_a_parameter_shared_by_two_layers_has_one_copy_and_frozen_ones_get_no_gradient() -> None:
    """The bookkeeping only: a layer used twice per forward is outside the bit-identity promise
    (its two fp16 gradients add in fp16), which is why a family opts in."""
    shared = nn.Conv2d(3, 3, 1)
    net = nn.Sequential(shared, nn.Conv2d(3, 3, 1), shared)
    net[1].weight.requires_grad_(False)
    copies = HalfWeights(net, torch.bfloat16)
    assert len(copies) == 4 and len(copies.trained) == 3
    with copies.installed():
        assert net[0].weight is net[2].weight and net[0].weight.dtype == torch.bfloat16
    assert net[0].weight is shared.weight and net[0].weight.dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False), copies.installed():
        loss = net(torch.rand(1, 3, 4, 4)).float().sum()
    loss.backward()
    copies.grads_to_masters()
    assert net[1].weight.grad is None and net[1].bias.grad is not None
    assert shared.weight.grad is not None and shared.weight.grad.dtype == torch.float32
    net[1].bias.requires_grad_(False)  # frozen mid-epoch: its copy still records a gradient, the master gets none
    net[1].bias.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False), copies.installed():
        loss = net(torch.rand(1, 3, 4, 4)).float().sum()
    loss.backward()
    copies.grads_to_masters()
    assert net[1].bias.grad is None


def test_a_layer_unfrozen_later_trains_through_its_copy() -> None:
    net = nn.Sequential(nn.Conv2d(3, 4, 1), nn.Conv2d(4, 2, 1))
    net[0].weight.requires_grad_(False)
    copies = HalfWeights(net, torch.bfloat16)
    assert len(copies.trained) == 3
    net[0].weight.requires_grad_(True)  # a callback unfreezes it between epochs
    copies.follow_requires_grad()
    assert len(copies.trained) == 4
    with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False), copies.installed():
        loss = net(torch.rand(1, 3, 4, 4)).float().sum()
    loss.backward()
    copies.grads_to_masters()
    assert net[0].weight.grad is not None and net[0].weight.grad.dtype == torch.float32


def test_applies_only_to_eager_single_process_cuda_amp_of_a_declaring_family() -> None:
    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    assert half_weights.applies(amp=True, device=cuda, graphed=False, world=1, declared=True)
    for change in ({"amp": False}, {"device": cpu}, {"graphed": True}, {"world": 2}, {"declared": False}):
        kwargs: dict[str, Any] = {"amp": True, "device": cuda, "graphed": False, "world": 1, "declared": True, **change}
        assert not half_weights.applies(**kwargs), change
    assert LibreYOLO9(size="t", nc=3).spec.task("detect").half_weights


def test_the_declaring_families_are_the_ones_checked_here() -> None:
    declaring = {name for name, spec in families().items() if any(t.half_weights for t in spec.tasks.values())}
    assert declaring == {"yolo9", *SMALL}


@pytest.mark.parametrize("family", sorted(SMALL))
def test_each_declaring_family_runs_a_layer_once_and_trains_bit_identically_on_copies(family: str) -> None:
    size, imgsz = SMALL[family]
    calls = _calls_per_layer(family, size, imgsz)
    assert calls and max(calls.values()) == 1, [name for name, n in calls.items() if n > 1]
    _assert_same_training(family, size, imgsz)


@pytest.mark.parametrize(("family", "size", "imgsz", "shared"), [
    ("rtmdet", "t", 64, "head.cls_convs.0.0.conv"),  # one head conv stack serves the three levels
    ("rtdetr", "r18", 128, "decoder.query_pos_head.layers.0"),  # once per decoder layer
])
def test_families_running_a_layer_more_than_once_do_not_declare(family: str, size: str, imgsz: int,
                                                                 shared: str) -> None:
    assert _calls_per_layer(family, size, imgsz)[shared] > 1
    assert not any(t.half_weights for t in families()[family].tasks.values())


@pytest.mark.cuda
@pytest.mark.parametrize("family", sorted(SMALL))
def test_each_declaring_family_trains_bit_identically_on_cuda_copies(family: str) -> None:
    """The CUDA form of the check above: fp16 autocast, fp16 copies. At least 64 px: at 32 px,
    batch 2, the last maps of EfficientNetV2 and MobileNetV4 are 1x1, and BatchNorm's gradients
    over two values overflow fp16 without a loss scale (copies or not)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    size, imgsz = SMALL[family]
    _assert_same_training(family, size, max(imgsz, 64), device="cuda")


@pytest.mark.cuda
def test_cuda_amp_training_with_copies_ends_with_the_casting_runs_weights(mini_shapes: Path, tmp_path: Path,
                                                                          monkeypatch) -> None:
    """The trainer end to end on one GPU (deterministic, accumulating micro-batches): the same
    weights and losses with the copies as with autocast's casts, and the copies did run."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from libreyolo_models.train import schedule

    moved = Counter[str]()
    real = HalfWeights.grads_to_masters

    def counting(self: HalfWeights) -> None:
        accumulating = any(m.grad is not None for m, _ in self.trained)
        real(self)
        moved["calls"] += 1
        moved["accumulated"] += accumulating

    monkeypatch.setattr(HalfWeights, "grads_to_masters", counting)
    monkeypatch.setattr(schedule, "MIN_STEPS_PER_EPOCH", 1)  # 6 batches an epoch may accumulate 4 (nbs 16 / 4)

    def train(name: str) -> tuple[dict[str, torch.Tensor], list[dict[str, str]]]:
        torch.manual_seed(0)
        model = LibreYOLO9(size="t", nc=3)
        outcome = model.train(data=str(mini_shapes), epochs=2, imgsz=96, batch=4, nbs=16, warmup_epochs=0, device=0,
                              workers=0, amp=True, deterministic=True, val=False, plots=False, seed=0,
                              project=str(tmp_path), name=name, verbose=False)
        with (outcome.run_dir / "results.csv").open() as fh:
            rows = [{k: v for k, v in row.items() if k.startswith("train/") and k.endswith("loss")}
                    for row in csv.DictReader(fh)]
        assert rows and all(rows)
        return {k: v.detach().cpu() for k, v in model.net.state_dict().items()}, rows

    with_copies, rows = train("copies")
    assert moved["calls"] > 0 and moved["accumulated"] > 0  # micro-batches added in fp32 on the device too
    monkeypatch.setattr(half_weights, "applies", lambda **_: False)
    calls = moved["calls"]
    casting, casting_rows = train("casts")
    assert moved["calls"] == calls  # the second run cast as before
    assert rows == casting_rows
    for name, value in casting.items():
        assert torch.equal(value, with_copies[name]), name
