"""``FusedOptimizer`` computes what ``torch.optim``'s fused SGD / Adam / AdamW compute, bit for bit,
through warmup-style option changes, a scaler's scale and inf flag, and checkpoints either way."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from libreyolo_models.train.fused_optim import FusedOptimizer
from libreyolo_models.train.optim import build_optimizer
from libreyolo_models.train.settings import TrainConfig

TORCH = {"SGD": torch.optim.SGD, "Adam": torch.optim.Adam, "AdamW": torch.optim.AdamW}
OPTIONS = {"SGD": {"lr": 0.01, "momentum": 0.9, "nesterov": True}, "Adam": {"lr": 0.01, "betas": (0.9, 0.999)},
           "AdamW": {"lr": 0.01, "betas": (0.9, 0.999)}}
# Beyond the trainer's settings: the other options the kernels take.
VARIANTS = [("SGD", {}), ("Adam", {}), ("AdamW", {}),
            ("SGD", {"nesterov": False, "dampening": 0.1}), ("SGD", {"maximize": True}),
            ("Adam", {"amsgrad": True}), ("AdamW", {"maximize": True, "eps": 1e-6})]


def _net(device: str = "cpu") -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.SiLU(), nn.Conv2d(8, 4, 1)).to(device)


def _groups(net: nn.Module) -> list[dict]:
    decay = [p for n, p in net.named_parameters() if n.endswith("weight") and p.dim() > 1]
    rest = [p for n, p in net.named_parameters() if not (n.endswith("weight") and p.dim() > 1)]
    return [{"params": decay, "weight_decay": 5e-4}, {"params": rest, "weight_decay": 0.0}]


def _backward(net: nn.Module, step: int, scale: float = 1.0) -> None:
    gen = torch.Generator().manual_seed(step)
    images = torch.rand(2, 3, 12, 12, generator=gen).to(next(net.parameters()).device)
    (net(images).square().mean() * scale).backward()


def _pair(kind: str, device: str = "cpu", **extra: object) -> tuple[nn.Module, FusedOptimizer, nn.Module,
                                                                   torch.optim.Optimizer]:
    ours_net, theirs_net = _net(device), _net(device)
    options = {**OPTIONS[kind], **extra}
    ours = FusedOptimizer(kind, _groups(ours_net), **options)
    theirs = TORCH[kind](_groups(theirs_net), fused=True, **options)
    return ours_net, ours, theirs_net, theirs


def _same(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def _step_both(pairs: list[tuple[nn.Module, object]], step: int, *, scale: float = 1.0,
               found_inf: float | None = None) -> None:
    for net, opt in pairs:
        _backward(net, step, scale)
        if found_inf is not None:  # what GradScaler hands a fused optimizer
            device = next(net.parameters()).device
            opt.grad_scale = torch.tensor(scale, device=device)  # type: ignore[attr-defined]
            opt.found_inf = torch.tensor(found_inf, device=device)  # type: ignore[attr-defined]
        opt.step()  # type: ignore[attr-defined]
        if found_inf is not None:
            del opt.grad_scale, opt.found_inf  # type: ignore[attr-defined]
        opt.zero_grad(set_to_none=True)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("kind", "extra"), VARIANTS)
def test_steps_are_bit_identical_to_torch_fused_through_option_changes_and_a_scaler(kind: str, extra: dict) -> None:
    ours_net, ours, theirs_net, theirs = _pair(kind, **extra)
    for opt in (ours, theirs):  # a parameter that never gets a gradient is left alone by both
        opt.param_groups[1]["params"].append(nn.Parameter(torch.ones(3)))
    pairs = [(ours_net, ours), (theirs_net, theirs)]
    for step in range(3):
        for opt in (ours, theirs):  # what the warmup schedule does every iteration
            for group in opt.param_groups:
                group["lr"] = 0.01 * (step + 1) / 3
                if "momentum" in group:
                    group["momentum"] = 0.8 + 0.05 * step
        _step_both(pairs, step)
    assert _same(ours_net, theirs_net) and not _same(ours_net, _net())
    assert torch.equal(ours.param_groups[1]["params"][-1], torch.ones(3))
    _step_both(pairs, 10, scale=1024.0, found_inf=0.0)  # scaled gradients, unscaled in the kernel
    assert _same(ours_net, theirs_net)
    before = [p.detach().clone() for p in ours_net.parameters()]
    _step_both(pairs, 11, scale=1024.0, found_inf=1.0)  # an overflow: nothing moves, steps not counted
    assert _same(ours_net, theirs_net)
    assert all(torch.equal(b, p) for b, p in zip(before, ours_net.parameters()))
    mine, torchs = ours.state_dict(), theirs.state_dict()
    assert mine["state"].keys() == torchs["state"].keys()
    for i, state in mine["state"].items():
        assert state.keys() == torchs["state"][i].keys()
        assert all(torch.equal(v, torchs["state"][i][k]) for k, v in state.items())
    if kind != "SGD":
        assert float(mine["state"][0]["step"]) == 4  # the overflowed step did not count
    assert len(mine["state"]) == len(torchs["state"]) == sum(1 for _ in ours_net.parameters())
    assert [g["params"] for g in mine["param_groups"]] == [g["params"] for g in torchs["param_groups"]]


@pytest.mark.parametrize("kind", ["SGD", "AdamW"])
def test_a_checkpoint_of_either_resumes_into_the_other(kind: str) -> None:
    ours_net, ours, theirs_net, theirs = _pair(kind)
    _step_both([(ours_net, ours), (theirs_net, theirs)], 0)
    # torch -> ours and ours -> torch, each continuing where the other stopped
    ours_resumed = FusedOptimizer(kind, _groups(theirs_net), **OPTIONS[kind])
    ours_resumed.load_state_dict(copy.deepcopy(theirs.state_dict()))  # as from a file
    theirs_resumed = TORCH[kind](_groups(ours_net), fused=True, **OPTIONS[kind])
    theirs_resumed.load_state_dict(copy.deepcopy(ours.state_dict()))
    reference_net = _net()
    reference_net.load_state_dict(theirs_net.state_dict())
    reference = TORCH[kind](_groups(reference_net), fused=True, **OPTIONS[kind])
    reference.load_state_dict(copy.deepcopy(theirs.state_dict()))
    _step_both([(theirs_net, ours_resumed), (ours_net, theirs_resumed), (reference_net, reference)], 1)
    assert _same(theirs_net, reference_net) and _same(ours_net, reference_net)


def test_an_sgd_first_step_skipped_for_an_overflow_leaves_no_momentum_behind() -> None:
    """GradScaler's first scale (2**16) often overflows the first step. torch's fused SGD leaves
    its momentum buffers as uninitialised memory then; ours start zeroed, so the run continues as
    if that step had never been (the weights equal a run that never had it)."""
    skipped_net, clean_net = _net(), _net()
    skipped = FusedOptimizer("SGD", _groups(skipped_net), **OPTIONS["SGD"])
    clean = FusedOptimizer("SGD", _groups(clean_net), **OPTIONS["SGD"])
    _step_both([(skipped_net, skipped)], 0, scale=2.0**16, found_inf=1.0)
    assert all(not b["momentum_buffer"].any() for b in skipped.state.values())
    for step in (1, 2):
        _step_both([(skipped_net, skipped), (clean_net, clean)], step)
    assert all(torch.equal(a, b) for a, b in zip(skipped_net.parameters(), clean_net.parameters()))


def test_a_foreach_cpu_checkpoint_of_the_old_trainer_resumes_in_channels_last() -> None:
    """The trainer's resume path: torch.optim.SGD(foreach=True) state (what CPU runs saved before),
    packed into a checkpoint, restored into channels_last parameters: the moments take the
    parameters' layout, the group's code-path keys become this class's, and the next step equals
    torch's fused SGD resumed from the same file."""
    from libreyolo_models.tensor_trees import pack_tensors, unpack_tensors

    old_net = _net()
    old = torch.optim.SGD(_groups(old_net), foreach=True, **OPTIONS["SGD"])
    _step_both([(old_net, old)], 0)
    saved = pack_tensors(copy.deepcopy(old.state_dict()))
    ours_net, theirs_net = (_net().to(memory_format=torch.channels_last) for _ in range(2))
    for net in (ours_net, theirs_net):
        net.load_state_dict(old_net.state_dict())
    ours = FusedOptimizer("SGD", _groups(ours_net), **OPTIONS["SGD"])
    ours.load_state_dict(unpack_tensors(saved))
    assert all(g["fused"] is True and g["foreach"] is None for g in ours.param_groups)
    weight = ours_net[0].weight
    assert ours.state[weight]["momentum_buffer"].stride() == weight.stride() != old_net[0].weight.stride()
    theirs = torch.optim.SGD(_groups(theirs_net), fused=True, **OPTIONS["SGD"])
    theirs.load_state_dict(unpack_tensors(copy.deepcopy(saved)))
    for group in theirs.param_groups:
        group["foreach"], group["fused"] = None, True
    from libreyolo_models.train.optim import align_state_layout

    align_state_layout(theirs)
    _step_both([(ours_net, ours), (theirs_net, theirs)], 1)
    assert _same(ours_net, theirs_net)


def test_build_optimizer_gives_the_fused_optimizer_with_the_schedule_keys() -> None:
    net = _net()
    opt = build_optimizer(_groups(net), TrainConfig(data="shapes", optimizer="SGD", lr0=0.02, momentum=0.9),
                          iterations=100)
    assert isinstance(opt, FusedOptimizer) and opt.kind == "SGD"
    assert all(g["initial_lr"] == 0.02 and g["nesterov"] for g in opt.param_groups)
    auto = build_optimizer(_groups(_net()), TrainConfig(data="shapes"), iterations=100)
    assert auto.kind == "AdamW" and auto.param_groups[0]["betas"] == (0.9, 0.999)


def test_bad_construction_and_mismatched_checkpoints_say_what_is_wrong() -> None:
    net = _net()
    with pytest.raises(ValueError, match="RMSprop"):
        FusedOptimizer("RMSprop", _groups(net))
    with pytest.raises(ValueError, match="Nesterov"):
        FusedOptimizer("SGD", _groups(net), nesterov=True)
    with pytest.raises(ValueError, match="more than one"):
        FusedOptimizer("SGD", [{"params": list(net.parameters())}, {"params": [next(net.parameters())]}])
    with pytest.raises(TypeError, match="betas"):
        FusedOptimizer("SGD", _groups(net), betas=(0.9, 0.99))
    with pytest.raises(ValueError, match="fused kernels"):
        FusedOptimizer("SGD", _groups(net), foreach=True)
    with pytest.raises(ValueError, match="twice"):
        FusedOptimizer("SGD", [{"params": [next(net.parameters())] * 2}])
    opt = FusedOptimizer("SGD", _groups(net), momentum=0.9)
    with pytest.raises(ValueError, match="1 parameter groups"):
        opt.load_state_dict(torch.optim.SGD(net.parameters(), lr=0.1).state_dict())
    with pytest.raises(ValueError, match="not a SGD"):
        opt.load_state_dict(torch.optim.AdamW(_groups(net)).state_dict())
    stray = FusedOptimizer("SGD", _groups(net), momentum=0.9).state_dict()
    stray["state"][99] = {"momentum_buffer": torch.zeros(1)}
    with pytest.raises(ValueError, match="parameter 99"):
        opt.load_state_dict(stray)


def test_zero_grad_without_set_to_none_zeroes_in_place() -> None:
    net = _net()
    opt = FusedOptimizer("SGD", _groups(net), momentum=0.9)
    _backward(net, 0)
    grad = next(net.parameters()).grad
    opt.zero_grad(set_to_none=False)
    assert grad is next(net.parameters()).grad and not grad.any()
    opt.zero_grad()
    assert all(p.grad is None for p in net.parameters())


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("kind", ["SGD", "AdamW"])
def test_behind_a_grad_scaler_steps_match_torch_fused(kind: str, device: str) -> None:
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    ours_net, ours, theirs_net, theirs = _pair(kind, device)
    scalers = [torch.amp.GradScaler(device, init_scale=2.0**16), torch.amp.GradScaler(device, init_scale=2.0**16)]
    # cuDNN's default weight-gradient kernels may sum in any order: both arms must get the same gradients.
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=True):
        for step in range(4):
            for (net, opt), scaler in zip([(ours_net, ours), (theirs_net, theirs)], scalers):
                images = torch.rand(2, 3, 12, 12, generator=torch.Generator().manual_seed(step)).to(device)
                loss = net(images).square().mean() * (torch.inf if step == 2 else 1.0)  # step 2 overflows
                scaler.scale(loss).backward()
                scaler.unscale_(opt)  # type: ignore[arg-type]
                scaler.step(opt)  # type: ignore[arg-type]
                scaler.update()
                opt.zero_grad(set_to_none=True)
            assert _same(ours_net, theirs_net), f"the weights differ after step {step}"
    assert scalers[0].get_scale() == scalers[1].get_scale() < 2.0**16  # the overflow was seen by both
    assert all(p.isfinite().all() for p in ours_net.parameters())  # and skipped
