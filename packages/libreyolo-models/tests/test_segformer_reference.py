"""SegFormer against an independent implementation: transformers' SegformerForSemanticSegmentation
(a test-only dev dependency) built from the published configurations.

Slow: importing transformers alone takes over ten seconds on a small CPU.
"""

from __future__ import annotations

import re

import pytest
import torch
from torch import Tensor, nn

from libreyolo_models.families.segformer.nn import ARCHS, SegFormerNet

transformers = pytest.importorskip("transformers")

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
pytestmark = pytest.mark.slow


def _hf_config(size: str, nc: int):  # noqa: ANN202
    arch = ARCHS[size]
    return transformers.SegformerConfig(num_labels=nc, hidden_sizes=list(arch.widths), depths=list(arch.depths),
                                        decoder_hidden_size=arch.decoder_width, num_attention_heads=list(arch.heads),
                                        sr_ratios=list(arch.sr_ratios), patch_sizes=list(arch.patch_sizes),
                                        strides=list(arch.patch_strides), drop_path_rate=arch.drop_path_rate)


def _to_ours(hf_state: dict[str, Tensor]) -> dict[str, Tensor]:
    """transformers' key names -> the published (and our) layout; its separate k and v
    projections become the published fused ``kv``."""
    rules = [
        (r"segformer\.stages\.(\d)\.patch_embeddings\.layer_norm", lambda m: f"backbone.patch_embed{int(m[1]) + 1}.norm"),
        (r"segformer\.stages\.(\d)\.patch_embeddings", lambda m: f"backbone.patch_embed{int(m[1]) + 1}"),
        (r"segformer\.stages\.(\d)\.blocks\.(\d+)\.", lambda m: f"backbone.block{int(m[1]) + 1}.{m[2]}."),
        (r"segformer\.stages\.(\d)\.layer_norm", lambda m: f"backbone.norm{int(m[1]) + 1}"),
        (r"layernorm_before", lambda m: "norm1"), (r"layernorm_after", lambda m: "norm2"),
        (r"attention\.q_proj", lambda m: "attn.q"), (r"attention\.o_proj", lambda m: "attn.proj"),
        (r"attention\.sequence_reduction\.sequence_reduction", lambda m: "attn.sr"),
        (r"attention\.sequence_reduction\.layer_norm", lambda m: "attn.norm"),
        (r"decode_head\.linear_projections\.(\d)", lambda m: f"decode_head.linear_c{int(m[1]) + 1}"),
        (r"decode_head\.linear_fuse\.weight", lambda m: "decode_head.linear_fuse.conv.weight"),
        (r"decode_head\.batch_norm", lambda m: "decode_head.linear_fuse.bn"),
        (r"decode_head\.classifier", lambda m: "decode_head.linear_pred"),
    ]
    out: dict[str, Tensor] = {}
    for key, value in hf_state.items():
        for pattern, repl in rules:
            key = re.sub(pattern, repl, key)
        out[key] = value
    for key in [k for k in out if ".attention.k_proj." in k]:
        v_key = key.replace("k_proj", "v_proj")
        fused = key.replace("attention.k_proj", "attn.kv")
        out[fused] = torch.cat((out.pop(key), out.pop(v_key)))
    return out


def test_parameter_counts_equal_transformers_for_every_size() -> None:
    nc = 150  # ADE20K, as the paper's table counts
    for size in ARCHS:
        with torch.device("meta"):
            reference = transformers.SegformerForSemanticSegmentation(_hf_config(size, nc))
            ours = SegFormerNet(size, nc, MEAN, STD)
        assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in reference.parameters()), size


def test_b0_forward_equals_transformers_with_the_same_weights() -> None:
    torch.manual_seed(0)
    reference = transformers.SegformerForSemanticSegmentation(_hf_config("b0", 5)).eval()
    with torch.no_grad():  # give BatchNorm non-trivial statistics so the fusion is really checked
        bn = reference.decode_head.batch_norm
        bn.running_mean.uniform_(-0.2, 0.2)
        bn.running_var.uniform_(0.5, 1.5)
    ours = SegFormerNet("b0", 5, MEAN, STD).eval()
    state = _to_ours(reference.state_dict())
    assert set(state) == set(ours.state_dict())
    ours.load_state_dict(state)
    for module in ours.modules():  # transformers uses torch's default LayerNorm eps everywhere
        if isinstance(module, nn.LayerNorm):
            module.eps = 1e-5
    images = torch.rand(2, 3, 96, 128, generator=torch.Generator().manual_seed(1))
    mean, std = torch.tensor(MEAN).view(1, 3, 1, 1), torch.tensor(STD).view(1, 3, 1, 1)
    with torch.no_grad():
        expected = reference(pixel_values=(images - mean) / std).logits
        got = ours(images)
    assert got.shape == expected.shape == (2, 5, 24, 32)
    assert torch.allclose(got, expected, atol=2e-5, rtol=1e-4), float((got - expected).abs().max())
