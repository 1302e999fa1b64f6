"""Re-parameterisable QARepVGG blocks (``layers/repvgg.py``): the fused convolution computes what the
branches compute, the fused inference copy leaves the trainable block alone, and the layout keeps
upstream's frozen ``rbr_reparam``."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from libreyolo_models.layers.fuse import fuse_network, fused_copy
from libreyolo_models.layers.repvgg import QARepVGGBlock, centred_kernel, identity_kernel


def _calibrated(block: QARepVGGBlock, seed: int) -> QARepVGGBlock:
    """Random weights and BatchNorm statistics far from the identity (what folding must carry)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in block.state_dict(keep_vars=True).items():
            if not t.is_floating_point():
                continue
            if name.endswith("running_var"):
                t.copy_(torch.rand(t.shape, generator=g) + 0.2)
            elif name.endswith("alpha"):
                t.fill_(0.7)
            else:
                t.copy_(torch.randn(t.shape, generator=g) * 0.5)
    return block.eval()


@pytest.mark.parametrize(("c_in", "c_out", "stride", "residual", "alpha"), [
    (8, 8, 1, True, False),    # a bottleneck's unit: 3x3 + 1x1 + identity
    (8, 8, 1, True, True),     # with a learnable 1x1 scale
    (3, 16, 2, False, False),  # a stem / downsampling unit: no identity at stride 2
])
def test_fused_block_equals_its_branches(c_in: int, c_out: int, stride: int, residual: bool, alpha: bool) -> None:
    block = _calibrated(QARepVGGBlock(c_in, c_out, stride, residual=residual, use_alpha=alpha), c_in + stride)
    x = torch.randn(2, c_in, 13, 11, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = block(x)
        assert fuse_network(block) == 1
        got = block(x)
    assert block.fused and not hasattr(block, "branch_3x3") and not hasattr(block, "post_bn")
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5 * expected.abs().max().item())
    assert fuse_network(block) == 0  # idempotent


def test_fused_kernel_matches_branches_in_float64() -> None:
    block = _calibrated(QARepVGGBlock(6, 6, residual=True, use_alpha=True), 5).double()
    x = torch.randn(1, 6, 9, 9, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    kernel, bias = block.fused_kernel()
    with torch.no_grad():
        expected = block.post_bn(block.branch_3x3(x) + block.alpha * block.branch_1x1(x) + x)
        folded = nn.functional.conv2d(x, kernel, bias, 1, 1)
    torch.testing.assert_close(folded, expected, rtol=1e-12, atol=1e-12)


def test_fused_copy_leaves_the_trainable_block_and_its_tensors_alone() -> None:
    block = _calibrated(QARepVGGBlock(4, 4), 6)
    before = {k: v.clone() for k, v in block.state_dict().items()}
    copy, count = fused_copy(nn.Sequential(block))
    assert count == 1 and not block.fused and copy[0].fused
    for key, value in block.state_dict().items():
        assert torch.equal(value, before[key]), key


def test_layout_keeps_upstreams_frozen_reparam_conv_after_the_branches() -> None:
    block = QARepVGGBlock(4, 8, 2, residual=False)
    assert list(block.state_dict()) == [
        "branch_3x3.conv.weight", "branch_3x3.bn.weight", "branch_3x3.bn.bias", "branch_3x3.bn.running_mean",
        "branch_3x3.bn.running_var", "branch_3x3.bn.num_batches_tracked", "branch_1x1.weight", "branch_1x1.bias",
        "post_bn.weight", "post_bn.bias", "post_bn.running_mean", "post_bn.running_var",
        "post_bn.num_batches_tracked", "rbr_reparam.weight", "rbr_reparam.bias"]
    assert not block.rbr_reparam.weight.requires_grad  # never read by the branches: DDP waits for no gradient
    assert {(m.eps, m.momentum) for m in block.modules() if isinstance(m, nn.BatchNorm2d)} == {(1e-3, 0.03)}
    block.train()(torch.rand(2, 4, 8, 8)).sum().backward()
    assert block.rbr_reparam.weight.grad is None and block.branch_1x1.weight.grad is not None


def test_identity_branch_needs_matching_shapes() -> None:
    with pytest.raises(ValueError, match="pass residual=False"):
        QARepVGGBlock(4, 8)
    with pytest.raises(ValueError, match="pass residual=False"):
        QARepVGGBlock(4, 4, 2)


def test_kernel_helpers() -> None:
    x = torch.randn(1, 4, 5, 5, dtype=torch.float64)
    torch.testing.assert_close(nn.functional.conv2d(x, identity_kernel(4, 1, 3), padding=1), x)
    torch.testing.assert_close(nn.functional.conv2d(x, identity_kernel(4, 2, 3), padding=1, groups=2), x)
    one = torch.randn(3, 4, 1, 1, dtype=torch.float64)
    torch.testing.assert_close(nn.functional.conv2d(x, centred_kernel(one, 3), padding=1), nn.functional.conv2d(x, one))
    with pytest.raises(ValueError, match="cannot centre"):
        centred_kernel(torch.zeros(1, 1, 2, 2), 3)
