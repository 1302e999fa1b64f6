"""``train.grad_tools``: clipping and unscaling with less host work, bit for bit torch's."""

from __future__ import annotations

import pytest
import torch

from libreyolo_models.train.fused_optim import FusedOptimizer
from libreyolo_models.train.grad_tools import LeanGradScaler, clip_grad_norm


def _params(seed: int, n: int = 9, dtype: torch.dtype = torch.float32) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    params = []
    for i in range(n):
        p = torch.nn.Parameter(torch.randn(3 + i, 2, generator=g, dtype=dtype))
        p.grad = torch.randn(p.shape, generator=g, dtype=dtype) * (10.0 if i % 3 == 0 else 0.1)
        params.append(p)
    return params


def _twins(params: list[torch.nn.Parameter]) -> list[torch.nn.Parameter]:
    twins = []
    for p in params:
        t = torch.nn.Parameter(p.detach().clone())
        t.grad = None if p.grad is None else p.grad.clone()
        twins.append(t)
    return twins


@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_clip_equals_torchs_bit_for_bit(max_norm: float) -> None:
    ours = _params(0)
    ours[4].grad = None  # a parameter without a gradient is left alone
    ref = _twins(ours)
    got = clip_grad_norm(ours, max_norm)
    want = torch.nn.utils.clip_grad_norm_(ref, max_norm)
    assert torch.equal(got, want)
    for a, b in zip(ours, ref):
        assert (a.grad is None and b.grad is None) or torch.equal(a.grad, b.grad)


def test_clip_with_mixed_dtypes_takes_torchs_path() -> None:
    ours = _params(1) + _params(2, n=3, dtype=torch.float64)
    ref = _twins(ours)
    assert torch.equal(clip_grad_norm(ours, 1.0), torch.nn.utils.clip_grad_norm_(ref, 1.0))
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(ours, ref))
    assert torch.equal(clip_grad_norm([torch.nn.Parameter(torch.ones(2))], 1.0), torch.tensor(0.0))  # no grads


@pytest.mark.parametrize("poison", [None, float("inf"), float("nan")])
def test_the_lean_scaler_steps_as_torchs_over_several_steps(poison: float | None) -> None:
    """Unscale, step (skipped on inf/NaN), update: the same weights, scale, growth tracker and
    found-inf flags as torch's GradScaler, step after step, and the same state dict."""
    params = _params(3)
    runs = {}
    for name, kind in (("lean", LeanGradScaler), ("torch", torch.amp.GradScaler)):
        ps = _twins(params)
        opt = FusedOptimizer("AdamW", [{"params": ps}], lr=1e-2)
        scaler = kind("cpu", init_scale=2.0**4, growth_interval=2)
        flags = []
        for step in range(5):
            scaler.scale(torch.ones(()))  # sets the scale up as a real step's loss would
            for i, p in enumerate(ps):
                p.grad = torch.full_like(p, 0.01 * (step + 1) * (i + 1)) * scaler.get_scale()
            if poison is not None and step == 2:
                ps[5].grad[0, 0] = poison
            scaler.unscale_(opt)
            flags.append([float(v) for v in scaler._check_inf_per_device(opt).values()])
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
        runs[name] = ([p.detach().clone() for p in ps], scaler.state_dict(), flags)
    (wa, sa, fa), (wb, sb, fb) = runs["lean"], runs["torch"]
    assert all(torch.equal(a, b) for a, b in zip(wa, wb))
    assert sa == sb and fa == fb
    assert (poison is None) == (fa[2] == [0.0])


def test_the_lean_scaler_refuses_fp16_gradients_in_torchs_words() -> None:
    p = torch.nn.Parameter(torch.ones(2, dtype=torch.float16))
    p.grad = torch.ones(2, dtype=torch.float16)
    opt = FusedOptimizer("SGD", [{"params": [p]}], lr=0.1)
    scaler = LeanGradScaler("cpu")
    scaler.scale(torch.ones(()))
    with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients"):
        scaler.unscale_(opt)


def test_one_device_and_dtype_takes_the_lean_path(monkeypatch) -> None:
    """The case training runs: neither torch's clip nor its per-tensor unscale loop is called."""
    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("torch's general path was taken")

    params = _params(4)
    opt = FusedOptimizer("SGD", [{"params": params}], lr=0.1, momentum=0.9)
    scaler = LeanGradScaler("cpu")
    scaler.scale(torch.ones(()))
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", refuse)
    monkeypatch.setattr(torch.amp.GradScaler, "_unscale_grads_", refuse)
    scaler.unscale_(opt)
    clip_grad_norm(params, 1.0)
    scaler.step(opt)
    scaler.update()
