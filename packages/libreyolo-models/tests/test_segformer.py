"""SegFormer: published sizes, checkpoint layout, graph-safe randomness, loss and optimizer groups."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from libreyolo_models import LibreYOLO, LossContext, UnknownFamilyError
from libreyolo_models.families.segformer.family import HEAD_LR_SCALE, SegFormerFamily
from libreyolo_models.families.segformer.loss import pixel_cross_entropy
from libreyolo_models.families.segformer.nn import ARCHS, SegFormerNet
from libreyolo_models.layers.drop_path import DropPath, drop_path
from libreyolo_models.zoo.registry import get_family, parse_model_name

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)

# Parameters with ADE20K's 150 classes. Recorded from transformers 5.24's
# SegformerForSemanticSegmentation with the published configurations (the slow test
# test_segformer_reference.py re-derives them); the paper's Table 1 rounds them to 3.8, 13.7,
# 27.5, 47.3, 64.1 and 84.7 M.
PARAMS_ADE20K = {"b0": 3_752_694, "b1": 13_715_798, "b2": 27_461_974, "b3": 47_337_814, "b4": 64_108_374,
                 "b5": 84_708_694}
PAPER_MILLIONS = {"b0": 3.8, "b1": 13.7, "b2": 27.5, "b3": 47.3, "b4": 64.1, "b5": 84.7}


def _meta_net(size: str, nc: int = 150) -> SegFormerNet:
    with torch.device("meta"):  # shapes only: no memory, no init cost
        return SegFormerNet(size, nc, MEAN, STD)


def _tiny_b0(nc: int = 3) -> SegFormerNet:
    torch.manual_seed(0)
    return SegFormerNet("b0", nc, MEAN, STD)


@pytest.mark.parametrize("size", list(ARCHS))
def test_each_size_has_the_published_parameter_count(size: str) -> None:
    count = sum(p.numel() for p in _meta_net(size).parameters())
    assert count == PARAMS_ADE20K[size]
    assert round(count / 1e6, 1) == PAPER_MILLIONS[size]


def test_state_dict_uses_the_published_checkpoint_keys_and_no_normalisation_buffers() -> None:
    keys = set(_meta_net("b0").state_dict())
    for key in ("backbone.patch_embed1.proj.weight", "backbone.block1.0.attn.kv.weight", "backbone.block1.1.attn.sr.weight",
                "backbone.block4.1.mlp.dwconv.dwconv.weight", "backbone.norm4.bias", "decode_head.linear_c4.proj.weight",
                "decode_head.linear_fuse.conv.weight", "decode_head.linear_fuse.bn.running_var",
                "decode_head.linear_pred.bias"):
        assert key in keys, key
    assert "backbone.block4.0.attn.sr.weight" not in keys  # the last stage attends at full resolution
    assert not any("normalize" in k for k in keys)          # mean/std are architecture, not weights


@pytest.mark.parametrize("size", list(ARCHS))
def test_size_and_classes_are_read_back_from_a_bare_state_dict(size: str) -> None:
    state = _meta_net(size, nc=7).state_dict()
    assert SegFormerFamily.infer_size(state, "semantic") == size
    assert SegFormerFamily.infer_nc(state, "semantic") == 7


def test_mmsegmentation_unused_classifier_is_dropped_on_load() -> None:
    state = {"decode_head.conv_seg.weight": torch.zeros(3, 256, 1, 1), "decode_head.linear_pred.bias": torch.zeros(3)}
    assert set(SegFormerFamily.remap_state(state)) == {"decode_head.linear_pred.bias"}


def test_seams_give_quarter_resolution_logits_and_full_resolution_class_maps() -> None:
    model = LibreYOLO("LibreSegFormerb0.yaml", nc=3)
    x = torch.rand(2, 3, 64, 96)
    assert model.training_forward(x).shape == (2, 3, 16, 24)
    model.eval()
    with torch.no_grad():
        maps = model.inference_forward(x)
    assert maps.shape == (2, 64, 96) and maps.dtype == torch.int64 and int(maps.max()) < 3


def test_eval_forward_draws_no_random_numbers_and_repeats_bit_for_bit() -> None:
    net = _tiny_b0().eval()
    x = torch.rand(1, 3, 64, 64)
    state = torch.get_rng_state()
    with torch.no_grad():
        a, b = net(x), net(x)
    assert torch.equal(a, b) and torch.equal(torch.get_rng_state(), state)


def test_train_forward_randomness_comes_from_torchs_generator() -> None:
    """Drop path and dropout draw from torch's generator (the one a CUDA graph registers), so a
    seed reproduces a training forward and another seed changes it."""
    net = _tiny_b0().train()
    x = torch.rand(2, 3, 64, 64)
    outs = []
    for seed in (1, 1, 2):
        torch.manual_seed(seed)
        outs.append(net(x))
    assert torch.equal(outs[0], outs[1]) and not torch.equal(outs[0], outs[2])


def test_drop_path_zeroes_whole_samples_and_keeps_the_expectation() -> None:
    torch.manual_seed(0)
    x = torch.ones(4000, 3, 5)
    out = drop_path(x, 0.25, training=True)
    per_sample = out.flatten(1)
    assert torch.all((per_sample == 0).all(1) | (per_sample == 1 / 0.75).all(1))  # all or nothing per sample
    assert abs(float((per_sample[:, 0] == 0).float().mean()) - 0.25) < 0.03
    assert torch.equal(drop_path(x, 0.25, training=False), x) and torch.equal(drop_path(x, 0.0, training=True), x)
    with pytest.raises(ValueError, match=r"rate=1.0 must be in \[0, 1\)"):
        DropPath(1.0)


def test_drop_rates_rise_linearly_to_the_published_point_one() -> None:
    rates = [m.rate for m in _meta_net("b2").modules() if isinstance(m, DropPath)]
    assert len(rates) == sum(ARCHS["b2"].depths) and rates[0] == 0.0 and rates[-1] == pytest.approx(0.1)
    assert all(b > a for a, b in zip(rates, rates[1:]))


def test_loss_is_the_mean_cross_entropy_of_labelled_pixels_at_mask_resolution() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 4, 4)
    masks = torch.randint(0, 3, (2, 16, 16), dtype=torch.uint8)
    masks[0, :8] = 255
    up = F.interpolate(logits, size=(16, 16), mode="bilinear", align_corners=False)
    per_pixel = F.cross_entropy(up, masks.long().clamp(max=2), reduction="none")
    expected = per_pixel[masks != 255].mean()
    assert torch.allclose(pixel_cross_entropy(logits, masks), expected, rtol=1e-6)
    everything_ignored = torch.full((2, 16, 16), 255, dtype=torch.uint8)
    assert float(pixel_cross_entropy(logits, everything_ignored)) == 0.0


def test_two_ranks_at_half_batch_give_the_gradient_of_one_rank() -> None:
    """Ignore pixels fall unevenly between the ranks; the loss still averages over the global batch."""
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 8, 8, requires_grad=True)
    masks = torch.randint(0, 3, (2, 8, 8), dtype=torch.uint8)
    masks[0, :6] = 255  # rank 0's image is mostly unlabelled
    pixel_cross_entropy(logits, masks).backward()
    whole = logits.grad.clone()
    logits.grad = None
    counts = [(masks[i] != 255).sum().float() for i in range(2)]
    for rank in range(2):  # each rank's normalizer all-reduce returns the sum of both counts
        pixel_cross_entropy(logits[rank:rank + 1], masks[rank:rank + 1], world_size=2,
                            normalizer_sum=lambda local: counts[0] + counts[1]).backward()
    assert torch.allclose(logits.grad / 2, whole, atol=1e-7)  # DDP averages the two ranks' gradients


def test_family_loss_applies_its_gain() -> None:
    model = LibreYOLO("LibreSegFormerb0.yaml", nc=3)
    logits, masks = torch.randn(1, 3, 4, 4), torch.zeros(1, 16, 16, dtype=torch.uint8)
    plain = model.family.compute_loss(logits, masks, LossContext(gains={"ce": 1.0}))
    doubled = model.family.compute_loss(logits, masks, LossContext(gains={"ce": 2.0}))
    assert torch.allclose(doubled.total, 2 * plain.total) and doubled.items.shape == (1,)


def test_decoder_trains_ten_times_faster_and_norms_and_biases_do_not_decay() -> None:
    model = LibreYOLO("LibreSegFormerb0.yaml", nc=3)
    groups = model.family.parameter_groups(model.net, weight_decay=0.01)
    head = {id(p) for p in model.net.decode_head.parameters()}
    for group in groups:
        in_head = {id(p) in head for p in group["params"]}
        assert len(in_head) == 1  # a group is all decoder or all encoder
        assert group.get("lr_scale", 1.0) == (HEAD_LR_SCALE if in_head == {True} else 1.0)
        assert group["weight_decay"] == (0.01 if group["group"] == "decay" else 0.0)
    assert sum(len(g["params"]) for g in groups) == len(list(model.net.parameters()))


def test_segformer_names_parse_with_and_without_the_task_suffix() -> None:
    for name in ("LibreSegFormerb0.yaml", "LibreSegFormerb3-sem.pt"):
        parsed = parse_model_name(name)
        assert (parsed.family.name, parsed.task) == ("segformer", "semantic")
    assert get_family("segformer").weight_name("b1") == "LibreSegFormerb1.pt"
    assert parse_model_name("LibreYOLO9t.pt").task == "detect"  # YOLO names are unchanged
    with pytest.raises(UnknownFamilyError, match="SegFormer has no task for suffix '-cls'"):
        parse_model_name("LibreSegFormerb0-cls.pt")
    with pytest.raises(UnknownFamilyError, match="no size 'b9'"):
        parse_model_name("LibreSegFormerb9.pt")


def test_declarations() -> None:
    spec = get_family("segformer")
    decl = spec.task("semantic")
    assert spec.sizes == ("b0", "b1", "b2", "b3", "b4", "b5") and spec.stride == 32
    assert spec.ddp_autospawn and not spec.sync_bn_default and spec.mean == MEAN and spec.std == STD
    assert decl.inference_capture and decl.train_capture  # set from green GPU parity rows (docs/parity-matrix.md)
    assert decl.recipe["optimizer"] == "AdamW" and decl.recipe["lr0"] == 6e-5 and decl.recipe["lrf"] == 0.0


def test_fuse_folds_the_decoder_batchnorm_and_keeps_the_class_maps() -> None:
    model = LibreYOLO("LibreSegFormerb0.yaml", nc=3)
    bn = model.net.decode_head.linear_fuse.bn
    with torch.no_grad():
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    model.eval()
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        logits = model.net(x)
        fused = model.fuse().fused_net()(x)
    assert isinstance(model.fused_net().decode_head.linear_fuse.bn, torch.nn.Identity)
    assert model.net.decode_head.linear_fuse.bn is bn  # the model's own network keeps its BatchNorm
    assert torch.allclose(fused, logits, atol=1e-4)


def test_a_fresh_network_starts_near_uniform_class_scores() -> None:
    net = _tiny_b0(nc=6).eval()
    with torch.no_grad():
        logits = net(torch.rand(2, 3, 64, 64))
    loss = F.cross_entropy(logits, torch.randint(0, 6, (2, 16, 16)))
    assert float(logits.abs().max()) < 1.0 and abs(float(loss) - torch.log(torch.tensor(6.0)).item()) < 0.3
