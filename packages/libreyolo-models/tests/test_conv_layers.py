"""The Conv unit's BatchNorm and SiLU: the same numbers as torch's modules, fewer kernels in a
training forward (a YOLO training step is launch-bound on the host)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from op_counts import OpCounter
from torch import nn

from libreyolo_models.layers.conv import BatchNorm2d, SiLU


def test_batchnorm_matches_torch_in_training_and_eval_without_a_counter_kernel() -> None:
    torch.manual_seed(0)
    ours, ref = BatchNorm2d(5, eps=1e-3, momentum=0.03), nn.BatchNorm2d(5, eps=1e-3, momentum=0.03)
    ref.load_state_dict(ours.state_dict())
    for _ in range(3):
        x = torch.randn(4, 5, 6, 6)
        version = ours.num_batches_tracked._version
        with OpCounter() as ops:
            out = ours(x)
        assert torch.equal(out, ref(x))
        assert "aten.add_" not in ops.seen  # no num_batches_tracked += 1 kernel ...
        assert ours.num_batches_tracked._version > version  # ... but the change is still visible
    assert torch.equal(ours.running_mean, ref.running_mean) and torch.equal(ours.running_var, ref.running_var)
    assert set(ours.state_dict()) == set(ref.state_dict())  # the checkpoint keys are the standard ones
    ours.eval(), ref.eval()
    x = torch.randn(2, 5, 3, 3)
    assert torch.equal(ours(x), ref(x))


def test_batchnorm_with_a_cumulative_average_keeps_counting() -> None:
    ours, ref = BatchNorm2d(3, momentum=None), nn.BatchNorm2d(3, momentum=None)
    for _ in range(3):
        x = torch.randn(4, 3, 2, 2)
        assert torch.equal(ours(x), ref(x))
    assert int(ours.num_batches_tracked) == 3 and torch.equal(ours.running_var, ref.running_var)


def test_silu_is_out_of_place_under_autograd_and_in_place_without_it() -> None:
    x = torch.randn(2, 3, 4, 4, requires_grad=True)
    y = x * 1.0
    with OpCounter() as ops:
        out = SiLU()(y)
    assert "aten.clone" not in ops.seen and ops.seen["aten.silu"] == 1  # in place would clone first
    assert torch.equal(out, F.silu(y.detach()))
    out.sum().backward()
    assert x.grad is not None
    with torch.no_grad():
        z = torch.randn(2, 3)
        expected = F.silu(z)
        same = SiLU()(z)
    assert same.data_ptr() == z.data_ptr() and torch.equal(same, expected)


def test_a_training_mode_forward_alone_makes_the_fused_copy_stale() -> None:
    from libreyolo_models import LibreYOLO9

    model = LibreYOLO9(size="t", nc=3, imgsz=64)
    model.net.eval()
    first = model.fused_net()
    model.net.train()
    with torch.no_grad():
        model.net(torch.rand(2, 3, 64, 64))  # BatchNorm statistics move, no weight does
    model.net.eval()
    assert not model.fused and model.fused_net() is not first


def test_a_folded_unit_calls_the_same_kernels_as_its_modules_and_gives_the_same_bits() -> None:
    from libreyolo_models.layers.conv import Conv

    torch.manual_seed(0)
    for act in (True, False):
        unit = Conv(4, 6, 3, s=2, act=act).eval()
        with torch.no_grad():  # statistics away from the defaults, so the fold does something
            unit.bn.running_mean.uniform_(-1, 1)
            unit.bn.running_var.uniform_(0.5, 2)
        assert unit.fuse_for_inference() and unit.folded
        x = torch.rand(2, 4, 9, 9)
        with torch.inference_mode(), OpCounter() as ops:
            fast = unit(x)
        assert ops.seen["aten.conv2d"] == 1 and ops.seen["aten.silu_"] == int(act) and sum(ops.seen.values()) == 1 + act
        unit.folded = False  # the module path: conv, Identity, activation
        with torch.inference_mode():
            assert torch.equal(fast, unit(x))
        unit.folded = True
        y = unit(x.requires_grad_())  # under autograd the fast path stays out of place
        y.sum().backward()
        assert x.grad is not None
