"""Inference fusion: BatchNorm folding, RepConvN branch merging, and the fused inference copy the
facade keeps beside a network that still trains and saves."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from libreyolo_models import SAMPLE_IMAGE, LibreYOLO, LibreYOLO9
from libreyolo_models.layers.fuse import fold_batchnorm, fuse_network, merge_parallel_convs
from libreyolo_models.layers.gelan import RepConvN


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


def _output(model: LibreYOLO, net: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return model.inference_forward(x, net=net)


X = torch.rand(2, 3, 128, 128, generator=torch.Generator().manual_seed(3))


def test_fused_copy_matches_unfused_with_fewer_modules_and_leaves_the_network_alone() -> None:
    model = _calibrated_model()
    before = {k: v.clone() for k, v in model.net.state_dict().items()}
    expected = _output(model, model.net, X)
    convs_before = sum(isinstance(m, nn.Conv2d) for m in model.net.modules())
    assert model.fuse() is model and model.fused and model.info()["fused"]
    fused = model.fused_net()
    assert fused is not model.net and not fused.training
    assert not any(isinstance(m, nn.BatchNorm2d) for m in fused.modules())
    repconvs = [m for m in fused.modules() if isinstance(m, RepConvN)]
    assert repconvs and all(m.conv2 is None for m in repconvs)
    assert sum(isinstance(m, nn.Conv2d) for m in fused.modules()) == convs_before - len(repconvs)
    # The model's own network is untouched: every BatchNorm and weight as it was.
    assert sum(isinstance(m, nn.BatchNorm2d) for m in model.net.modules()) > 0
    assert all(torch.equal(v, before[k]) for k, v in model.net.state_dict().items())
    # Memory: tensors fusion leaves alone are shared, not copied; only folded convolutions are new.
    own = {id(p) for p in model.net.parameters()}
    shared = [p for p in fused.parameters() if id(p) in own]
    assert shared and sum(p.numel() for p in fused.parameters() if id(p) not in own) < model.n_parameters()
    got = _output(model, fused, X)
    assert (got - expected).abs().max() <= 1e-4 * expected.abs().max()  # rounding, not a different network
    assert not torch.equal(got, expected)  # really the folded network
    assert model.fused_net() is fused  # kept while the weights stay


def test_predict_defaults_to_the_fused_copy_and_fuse_false_is_the_exact_network() -> None:
    model = _calibrated_model()
    assert model.wants_fuse() and model.info()["fuse_by_default"]  # YOLOv9 declares inference_fuse
    opts = {"conf": 0.0, "max_det": 5, "imgsz": 128}
    default = model(SAMPLE_IMAGE, **opts)[0].boxes.data
    assert model.fused
    fused = model(SAMPLE_IMAGE, fuse=True, **opts)[0].boxes.data
    exact = model(SAMPLE_IMAGE, fuse=False, **opts)[0].boxes.data
    assert torch.equal(default, fused)
    # fuse=False: what the unfused network computes, bit for bit (a model that never fused).
    fresh = LibreYOLO9(size="t", nc=3, imgsz=128)
    fresh.net.load_state_dict(model.net.state_dict())
    fresh.fuse(False)
    assert not fresh.wants_fuse() and not fresh.fused
    assert torch.equal(exact, fresh(SAMPLE_IMAGE, **opts)[0].boxes.data)
    assert not fresh.fused  # fuse(False) is the model's default now: no copy was built
    assert not torch.equal(default, exact)
    torch.testing.assert_close(default[:, 4], exact[:, 4], rtol=1e-4, atol=1e-5)


def test_after_predict_the_model_trains_saves_and_predicts_with_its_new_weights(tmp_path: Path) -> None:
    model = _calibrated_model()
    model(SAMPLE_IMAGE, conf=0.0, max_det=5, imgsz=128)
    old = model.fused_net()
    stale = _output(model, old, X)
    # A training step of the user's own loop: a training-mode forward (BatchNorm statistics move)
    # and an in-place weight update, as an optimizer makes.
    model.net.train()
    with torch.no_grad():
        model.net(torch.rand(2, 3, 128, 128))
        for p in model.net.parameters():
            p.mul_(1.01)
    model.net.eval()
    assert not model.fused  # the copy no longer matches the weights
    new = model.fused_net()
    assert new is not old
    fresh_fold = LibreYOLO9(size="t", nc=3, imgsz=128)
    fresh_fold.net.load_state_dict(model.net.state_dict())
    expected = _output(fresh_fold, fresh_fold.fuse().fused_net(), X)
    got = _output(model, new, X)
    assert torch.equal(got, expected) and not torch.equal(got, stale)
    # load_state_dict straight into the network is seen too.
    model.net.load_state_dict(fresh_fold.net.state_dict())
    assert not model.fused and model.fused_net() is not new
    path = model.save(tmp_path / "after_predict.pt")
    again = LibreYOLO(path)
    assert any(isinstance(m, nn.BatchNorm2d) for m in again.net.modules())  # saved unfused
    assert all(torch.equal(a, b) for a, b in zip(again.net.state_dict().values(), model.net.state_dict().values()))


@pytest.mark.slow
def test_train_after_predict_drops_the_copy_and_predict_then_folds_the_trained_weights(mini_shapes, tmp_path) -> None:
    model = LibreYOLO9(size="t", nc=3, imgsz=64)
    model(SAMPLE_IMAGE, conf=0.0, max_det=5, imgsz=64)
    before = model.fused_net()
    model.train(data=str(mini_shapes), project=str(tmp_path), imgsz=64, batch=8, workers=0, epochs=1,
                close_mosaic=0, plots=False, verbose=False, device="cpu")
    assert not model.fused  # dropped by train(); nothing stale is kept
    after = model.fused_net()
    assert after is not before
    reference = LibreYOLO9(size="t", nc=model.nc, imgsz=64)  # training took the data's classes
    reference.net.load_state_dict(model.net.state_dict())
    assert torch.equal(_output(model, after, X[:, :, :64, :64]),
                       _output(reference, reference.fuse().fused_net(), X[:, :, :64, :64]))
    model.save(tmp_path / "trained.pt")  # still savable


def test_moves_casts_and_fuse_false_drop_the_copy() -> None:
    model = _calibrated_model()
    model.fuse()
    model.fuse(False)
    assert not model.fused and model.handle.fused_copy is None and not model.wants_fuse()
    assert model.wants_fuse(True)  # one call's option wins over the model's choice
    model.fuse()
    model.half()  # the copy is cast along, still current
    assert model.fused and next(model.fused_net().parameters()).dtype == torch.float16
    model.float()
    assert not model.fused and model.handle.fused_copy is None


def test_a_fuse_hook_that_writes_into_shared_weights_is_caught() -> None:
    class Bad(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 3, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.conv(x)

        def fuse_for_inference(self) -> bool:
            with torch.no_grad():
                self.conv.weight.mul_(2)  # writes into a tensor shared with the original
            return True

    from libreyolo_models.layers.fuse import fused_copy

    with pytest.raises(RuntimeError, match="wrote into 1 of its original tensors"):
        fused_copy(Bad())


def test_graph_warmup_restoring_the_copys_buffers_does_not_make_it_stale() -> None:
    from libreyolo_cudagraph.state import preserved_state

    model = _calibrated_model()
    fused = model.fused_net()
    own = {id(b) for b in model.net.buffers()}
    assert not any(id(b) in own for b in fused.buffers())  # buffers are the copy's own
    with preserved_state(fused):  # what GraphRunner does around warmup: copy_ into every buffer
        _output(model, fused, X)
    assert model.fused and model.fused_net() is fused  # still current: no rebuild, no recapture


def test_a_channels_last_copy_owns_its_kernels_and_the_uint8_input_follows_its_layout() -> None:
    """What fp16 inference runs on CUDA (``fused_channels_last``), asked for directly on the CPU:
    the fused copy's channels_last twin. The model's network and the NCHW copy keep their layout."""
    from libreyolo_models.fused_net import FusedNetwork
    from libreyolo_models.layers.layout import is_channels_last

    model = _calibrated_model()
    pixels = (X * 255).round().to(torch.uint8)
    fused = model.fused_net()
    expected = _output(model, fused, pixels)
    last = model.fused_net(channels_last=True)
    assert model.fused_net(channels_last=True) is last and model.fused_net() is fused  # both kept
    assert is_channels_last(last) and not is_channels_last(model.net) and not is_channels_last(fused)
    kernels = [p for p in last.parameters() if p.dim() == 4]
    assert kernels and all(p.is_contiguous(memory_format=torch.channels_last) for p in kernels)
    others = {id(p) for p in [*model.net.parameters(), *fused.parameters()]}
    assert not any(id(p) in others for p in kernels)  # no shared kernel was converted under them
    assert all(p.is_contiguous() for p in [*model.net.parameters(), *fused.parameters()])
    assert any(id(p) in others for p in last.parameters())  # the rest stays shared
    assert not model.fused_channels_last and model.inference_net() is fused  # fp32 on the CPU: NCHW
    seen: list[torch.Tensor] = []
    handle = last.register_forward_pre_hook(lambda _m, args: seen.append(args[0]))
    got = _output(model, last, pixels)
    handle.remove()
    assert seen[0].is_contiguous(memory_format=torch.channels_last) and seen[0].dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)  # the same network, another layout
    model.to("cpu").float()
    with torch.no_grad():
        next(model.net.parameters()).add_(0.0)  # a write: both copies are stale and go together
    assert model.fused_net(channels_last=True) is not last and model.fused_net() is not fused
    held = FusedNetwork()
    with pytest.raises(RuntimeError, match="no fused copy"):
        held.channels_last()
