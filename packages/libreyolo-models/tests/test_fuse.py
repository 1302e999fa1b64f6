"""Inference fusion: BatchNorm folding, RepConvN branch merging, and the facade's one-way contract."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from libreyolo_models import SAMPLE_IMAGE, ConfigError, LibreYOLO, LibreYOLO9
from libreyolo_models.families.yolo9.blocks import RepConvN
from libreyolo_models.layers.fuse import fold_batchnorm, fuse_network, merge_parallel_convs


def _random_bn(bn: nn.BatchNorm2d, g: torch.Generator) -> None:
    with torch.no_grad():
        n = bn.num_features
        bn.weight.copy_(torch.rand(n, generator=g) + 0.5)
        bn.bias.copy_(torch.randn(n, generator=g))
        bn.running_mean.copy_(torch.randn(n, generator=g))
        bn.running_var.copy_(torch.rand(n, generator=g) + 0.1)


@pytest.mark.parametrize(("k", "stride", "groups", "bias"), [(3, 1, 1, False), (1, 2, 1, True), (3, 2, 4, False)])
def test_folded_conv_equals_conv_then_batchnorm(k: int, stride: int, groups: int, bias: bool) -> None:
    g = torch.Generator().manual_seed(k + stride + groups)
    conv = nn.Conv2d(8, 16, k, stride, k // 2, groups=groups, bias=bias).double()
    bn = nn.BatchNorm2d(16, eps=1e-3).double().eval()
    _random_bn(bn, g)
    x = torch.randn(2, 8, 11, 13, generator=g, dtype=torch.float64)
    fused = fold_batchnorm(conv, bn)
    assert fused.bias is not None and fused.stride == conv.stride and fused.groups == groups
    torch.testing.assert_close(fused(x), bn(conv(x)), rtol=1e-12, atol=1e-12)


def test_merged_branches_equal_their_sum_and_misaligned_ones_are_refused() -> None:
    g = torch.Generator().manual_seed(1)
    big = nn.Conv2d(4, 6, 3, 1, 1).double()
    small = nn.Conv2d(4, 6, 1, 1, 0).double()
    x = torch.randn(1, 4, 9, 9, generator=g, dtype=torch.float64)
    expected = big(x) + small(x)
    merge_parallel_convs(big, small)
    torch.testing.assert_close(big(x), expected, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="not aligned"):
        merge_parallel_convs(nn.Conv2d(4, 6, 3, 1, 1), nn.Conv2d(4, 6, 1, 2, 0))  # other stride
    with pytest.raises(ValueError, match="not aligned"):
        merge_parallel_convs(nn.Conv2d(4, 6, 3, 1, 0), nn.Conv2d(4, 6, 1, 1, 0))  # outputs shifted


def test_repconvn_becomes_one_convolution_with_the_same_output() -> None:
    g = torch.Generator().manual_seed(2)
    block = RepConvN(8, 8).eval()
    for m in block.modules():
        if isinstance(m, nn.BatchNorm2d):
            _random_bn(m, g)
    x = torch.randn(2, 8, 16, 16, generator=g)
    with torch.no_grad():
        expected = block(x)
        assert fuse_network(block) == 3  # two Conv folds and the merge
        assert block.conv2 is None and isinstance(block.conv1.bn, nn.Identity)
        torch.testing.assert_close(block(x), expected, rtol=1e-5, atol=1e-5)
        assert fuse_network(block) == 0  # idempotent


def _calibrated_model() -> LibreYOLO:
    """Untrained YOLOv9-t whose BatchNorm statistics are not the identity (what folding must carry)."""
    torch.manual_seed(0)
    model = LibreYOLO9(size="t", nc=3, imgsz=128)
    norms = [m for m in model.net.modules() if isinstance(m, nn.BatchNorm2d)]
    for m in norms:
        m.momentum = 1.0
    model.net.train()
    with torch.no_grad():
        model.net(torch.rand(4, 3, 128, 128))
    return model.eval()


def test_fused_yolo9_matches_unfused_with_fewer_modules() -> None:
    model = _calibrated_model()
    x = torch.rand(2, 3, 128, 128, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = model.inference_forward(x)
    convs_before = sum(isinstance(m, nn.Conv2d) for m in model.net.modules())
    params_before = model.n_parameters()
    assert model.fuse() is model and model.fused and model.info()["fused"]
    assert not any(isinstance(m, nn.BatchNorm2d) for m in model.net.modules())
    repconvs = [m for m in model.net.modules() if isinstance(m, RepConvN)]
    assert repconvs and all(m.conv2 is None for m in repconvs)
    assert sum(isinstance(m, nn.Conv2d) for m in model.net.modules()) == convs_before - len(repconvs)
    assert model.n_parameters() < params_before
    with torch.no_grad():
        got = model.inference_forward(x)
    scale = expected.abs().max()
    assert (got - expected).abs().max() <= 1e-4 * scale  # rounding, not a different network


def test_a_fused_model_refuses_to_train_or_save_and_load_undoes_it(tmp_path: Path) -> None:
    model = _calibrated_model()
    weights = model.save(tmp_path / "w.pt")
    model.fuse()
    with pytest.raises(ConfigError, match=r"cannot save a checkpoint: this model was fused.*model.load"):
        model.save(tmp_path / "fused.pt")
    assert not (tmp_path / "fused.pt").exists()
    with pytest.raises(ConfigError, match="cannot train: this model was fused"):
        model.train(data="shapes", epochs=1, device="cpu")
    model.load(weights)
    assert not model.fused and any(isinstance(m, nn.BatchNorm2d) for m in model.net.modules())


def test_predict_option_fuses_the_model_in_place() -> None:
    model = _calibrated_model()
    unfused = model(SAMPLE_IMAGE, conf=0.0, max_det=5, imgsz=128)
    fused = model(SAMPLE_IMAGE, conf=0.0, max_det=5, imgsz=128, fuse=True)
    assert model.fused
    torch.testing.assert_close(fused[0].boxes.conf, unfused[0].boxes.conf, rtol=1e-4, atol=1e-5)
