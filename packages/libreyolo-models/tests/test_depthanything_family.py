"""Depth Anything V2: the official checkpoint layout of every size (the key rules written down in
docs/families/depthanything.md, rebuilt here from those rules alone), the numbers of transformers'
implementation on converted weights, the official input geometry, and ``Results.depth``."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from libreyolo_models import SAMPLE_IMAGE, LibreYOLO
from libreyolo_models.contract.classifier_spec import IMAGENET_MEAN, IMAGENET_STD
from libreyolo_models.errors import ConfigError
from libreyolo_models.families.depthanything.family import DepthAnythingFamily
from libreyolo_models.families.depthanything.nn import ARCHS, DepthAnythingV2, DepthArch
from libreyolo_models.tasks.depth.depth_map import DepthMap
from libreyolo_models.tasks.depth.resize import constrain_to_multiple, network_size
from libreyolo_models.tasks.results import Results

# (width, blocks, out_channels, features) per size: the official run.py model_configs and dinov2.py
OFFICIAL = {"s": (384, 12, (48, 96, 192, 384), 64), "b": (768, 12, (96, 192, 384, 768), 128),
            "l": (1024, 24, (256, 512, 1024, 1024), 256)}
LAYERS = {"s": (2, 5, 8, 11), "b": (2, 5, 8, 11), "l": (4, 11, 17, 23)}  # dpt.py intermediate_layer_idx


def official_layout(width: int, blocks: int, out: tuple[int, ...], features: int) -> list[tuple[str, tuple]]:
    """Every key and shape of an official Depth Anything V2 checkpoint, in order (the docs' rules)."""
    def lin(name: str, o: int, i: int) -> list[tuple[str, tuple]]:
        return [(f"{name}.weight", (o, i)), (f"{name}.bias", (o,))]

    def conv(name: str, o: int, i: int, k: int, bias: bool = True) -> list[tuple[str, tuple]]:
        return [(f"{name}.weight", (o, i, k, k))] + ([(f"{name}.bias", (o,))] if bias else [])

    def norm(name: str, c: int) -> list[tuple[str, tuple]]:
        return [(f"{name}.weight", (c,)), (f"{name}.bias", (c,))]

    p = "pretrained"
    keys = [(f"{p}.cls_token", (1, 1, width)), (f"{p}.pos_embed", (1, 37 * 37 + 1, width)),
            (f"{p}.mask_token", (1, width))] + conv(f"{p}.patch_embed.proj", width, 3, 14)
    for i in range(blocks):
        b = f"{p}.blocks.{i}"
        keys += (norm(f"{b}.norm1", width) + lin(f"{b}.attn.qkv", 3 * width, width) + lin(f"{b}.attn.proj", width, width)
                 + [(f"{b}.ls1.gamma", (width,))] + norm(f"{b}.norm2", width) + lin(f"{b}.mlp.fc1", 4 * width, width)
                 + lin(f"{b}.mlp.fc2", width, 4 * width) + [(f"{b}.ls2.gamma", (width,))])
    keys += norm(f"{p}.norm", width)
    h = "depth_head"
    keys += [k for i, c in enumerate(out) for k in conv(f"{h}.projects.{i}", c, width, 1)]
    keys += [(f"{h}.resize_layers.0.weight", (out[0], out[0], 4, 4)), (f"{h}.resize_layers.0.bias", (out[0],)),
             (f"{h}.resize_layers.1.weight", (out[1], out[1], 2, 2)), (f"{h}.resize_layers.1.bias", (out[1],))]
    keys += conv(f"{h}.resize_layers.3", out[3], out[3], 3)
    keys += [k for i, c in enumerate(out) for k in conv(f"{h}.scratch.layer{i + 1}_rn", features, c, 3, bias=False)]
    for r in range(1, 5):
        f = f"{h}.scratch.refinenet{r}"
        keys += conv(f"{f}.out_conv", features, features, 1)
        keys += [k for u in (1, 2) for c in (1, 2) for k in conv(f"{f}.resConfUnit{u}.conv{c}", features, features, 3)]
    keys += conv(f"{h}.scratch.output_conv1", features // 2, features, 3)
    keys += conv(f"{h}.scratch.output_conv2.0", 32, features // 2, 3) + conv(f"{h}.scratch.output_conv2.2", 1, 32, 1)
    return keys


@pytest.mark.parametrize("size", ["s", "b", "l"])
def test_every_size_has_the_official_keys_shapes_and_order(size: str) -> None:
    width, blocks, out, features = OFFICIAL[size]
    arch = ARCHS[size]
    assert (arch.width, arch.depth, arch.out_channels, arch.features, arch.layers) == (width, blocks, out, features,
                                                                                         LAYERS[size])
    with torch.device("meta"):
        state = DepthAnythingV2(arch, IMAGENET_MEAN, IMAGENET_STD).state_dict()
    expected = official_layout(width, blocks, out, features)
    assert [(k, tuple(v.shape)) for k, v in state.items()] == expected
    assert DepthAnythingFamily.infer_size({k: torch.empty(s, device="meta") for k, s in expected}, "depth") == size


def test_parameter_counts_match_the_published_ones() -> None:
    counts = {size: sum(math.prod(s) for _, s in official_layout(*OFFICIAL[size])) for size in OFFICIAL}
    assert {s: round(n / 1e6, 1) for s, n in counts.items()} == {"s": 24.8, "b": 97.5, "l": 335.3}  # README table


def _to_transformers(state: dict[str, torch.Tensor], attention: tuple[str, str, str, str]) -> dict[str, torch.Tensor]:
    """Official names -> transformers' DepthAnythingForDepthEstimation names (``attention``: its
    query, key, value and output projection names, which changed between transformers versions)."""
    q, k, v, o = attention
    out: dict[str, torch.Tensor] = {}
    fixed = {"pretrained.cls_token": "backbone.embeddings.cls_token",
             "pretrained.pos_embed": "backbone.embeddings.position_embeddings",
             "pretrained.mask_token": "backbone.embeddings.mask_token",
             "depth_head.scratch.output_conv1": "head.conv1", "depth_head.scratch.output_conv2.0": "head.conv2",
             "depth_head.scratch.output_conv2.2": "head.conv3",
             "pretrained.patch_embed.proj": "backbone.embeddings.patch_embeddings.projection",
             "pretrained.norm": "backbone.layernorm"}
    for key, value in state.items():
        base, _, leaf = key.rpartition(".")
        if key in fixed or base in fixed:
            out[fixed[key] if key in fixed else f"{fixed[base]}.{leaf}"] = value
        elif m := re.fullmatch(r"pretrained\.blocks\.(\d+)\.attn\.qkv\.(\w+)", key):
            for name, part in zip((q, k, v), value.chunk(3, 0)):
                out[f"backbone.encoder.layer.{m[1]}.{name}.{m[2]}"] = part
        elif m := re.fullmatch(r"pretrained\.blocks\.(\d+)\.(.+)", key):
            rest = m[2].replace("attn.proj", o).replace("ls1.gamma", "layer_scale1.lambda1")
            out[f"backbone.encoder.layer.{m[1]}.{rest.replace('ls2.gamma', 'layer_scale2.lambda1')}"] = value
        elif m := re.fullmatch(r"depth_head\.(projects|resize_layers)\.(\d)\.(\w+)", key):
            kind = "projection" if m[1] == "projects" else "resize"
            out[f"neck.reassemble_stage.layers.{m[2]}.{kind}.{m[3]}"] = value
        elif m := re.fullmatch(r"depth_head\.scratch\.layer(\d)_rn\.weight", key):
            out[f"neck.convs.{int(m[1]) - 1}.weight"] = value
        elif m := re.fullmatch(r"depth_head\.scratch\.refinenet(\d)\.(.+)", key):
            rest = re.sub(r"resConfUnit(\d)\.conv(\d)", r"residual_layer\1.convolution\2", m[2].replace("out_conv",
                                                                                                       "projection"))
            out[f"neck.fusion_stage.layers.{4 - int(m[1])}.{rest}"] = value
        else:
            raise KeyError(key)
    return out


def test_equals_transformers_depth_anything_on_converted_weights() -> None:
    """A small random configuration: every weight converted by name, outputs equal to float precision
    at the learned patch layout (transformers resamples positions differently from the official
    code, so other layouts are not compared)."""
    transformers = pytest.importorskip("transformers", reason="transformers is the numeric reference")
    arch = DepthArch(32, 4, 2, (0, 1, 2, 3), 16, (8, 16, 32, 32), grid=4)
    torch.manual_seed(0)
    ours = DepthAnythingV2(arch, IMAGENET_MEAN, IMAGENET_STD).eval()
    with torch.no_grad():
        for param in ours.parameters():
            param.normal_(0.0, 0.2)
    backbone = transformers.Dinov2Config(hidden_size=32, num_hidden_layers=4, num_attention_heads=2,
                                         intermediate_size=128, patch_size=14, image_size=56, layerscale_value=1.0,
                                         out_features=["stage1", "stage2", "stage3", "stage4"],
                                         reshape_hidden_states=False, apply_layernorm=True)
    config = transformers.DepthAnythingConfig(backbone_config=backbone, reassemble_hidden_size=32, patch_size=14,
                                              neck_hidden_sizes=[8, 16, 32, 32], fusion_hidden_size=16,
                                              head_hidden_size=32, depth_estimation_type="relative", max_depth=1,
                                              reassemble_factors=[4, 2, 1, 0.5])
    reference = transformers.DepthAnythingForDepthEstimation(config).eval()
    names = reference.state_dict()
    attention = (("attention.q_proj", "attention.k_proj", "attention.v_proj", "attention.o_proj")
                 if any(".attention.q_proj." in n for n in names) else
                 ("attention.attention.query", "attention.attention.key", "attention.attention.value",
                  "attention.output.dense"))
    reference.load_state_dict(_to_transformers(ours.state_dict(), attention), strict=True)
    images = torch.rand(2, 3, 56, 56)
    mean, std = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    with torch.no_grad():
        expected = reference(pixel_values=(images - mean) / std).predicted_depth
        got = ours(images)
    assert got.shape == expected.shape == (2, 56, 56)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5 * float(expected.abs().max()))


def test_positions_are_resampled_for_other_layouts() -> None:
    ours = DepthAnythingV2(DepthArch(32, 4, 2, (0, 1, 2, 3), 16, (8, 16, 32, 32), grid=4), IMAGENET_MEAN, IMAGENET_STD)
    vit = ours.pretrained
    assert vit.positions(4, 4) is vit.pos_embed
    assert vit.positions(3, 6).shape == (1, 1 + 18, 32)
    torch.testing.assert_close(vit.positions(3, 6)[:, 0], vit.pos_embed[:, 0])  # the class token's row unchanged
    with torch.no_grad():
        assert ours(torch.rand(1, 3, 42, 84)).shape == (1, 42, 84)


def test_official_input_geometry() -> None:
    """run.py's Resize(518, 518, keep_aspect_ratio, ensure_multiple_of=14, lower_bound)."""
    assert network_size(360, 480, 518) == (518, 686)    # 690.7 -> 49.3 patches -> 49
    assert network_size(480, 360, 518) == (686, 518)
    assert network_size(518, 518, 518) == (518, 518)
    assert network_size(1000, 100, 518) == (5180, 518)
    assert constrain_to_multiple(517.0, 14, 518) == 518     # rounds to 518
    assert constrain_to_multiple(510.0, 14, 518) == 518     # 504 < 518: the next multiple


def test_training_and_export_are_refused() -> None:
    model = LibreYOLO("LibreDepthAnythingV2s.yaml", imgsz=56)
    with pytest.raises(ConfigError, match="pretrained-only"):
        model.train(data="shapes", epochs=1)
    with pytest.raises(ConfigError, match="inference-only"):
        model.family.training_forward(model.net, torch.zeros(1, 3, 56, 56))
    with pytest.raises(ConfigError, match="does not export"):
        model.export(format="onnx")


def test_predict_gives_depth_at_the_pictures_size(tmp_path: Path) -> None:
    model = LibreYOLO("LibreDepthAnythingV2s.yaml", imgsz=56)
    with torch.no_grad():
        for param in model.net.depth_head.parameters():
            param.add_(0.01)  # a fresh head's ReLUs give zeros: spread the output a little
    result = model(SAMPLE_IMAGE)[0]
    assert result.boxes is None and result.depth.shape == result.orig_shape == (360, 480)
    again = LibreYOLO(str(model.save(str(tmp_path / "da.pt"))))
    assert (again.size, again.task, again.imgsz) == ("s", "depth", 56)
    assert torch.equal(again(SAMPLE_IMAGE)[0].depth.data, result.depth.data)
    batch, infos = model.task_spec.prepare_batch([torch.zeros(30, 40, 3, dtype=torch.uint8),
                                                  torch.zeros(40, 30, 3, dtype=torch.uint8)], 56, torch.float32,
                                                 torch.device("cpu"))
    assert batch.shape == (2, 3, 70, 70) and infos == [((30, 40), (56, 70)), ((40, 30), (70, 56))]


def test_depth_content_through_results(tmp_path: Path) -> None:
    depth = torch.linspace(0, 2, 12).view(3, 4)
    result = Results(np.zeros((3, 4, 3), np.uint8), "x", {0: "image"}, contents={"depth": DepthMap(depth)})
    assert result.summary() == "relative depth 0..2 (4x3)" and len(result) == 1
    assert json.loads(result.to_json()) == [{"min": 0.0, "max": 2.0, "mean": 1.0}]
    colours = result.plot()
    assert colours.shape == (3, 4, 3) and colours.dtype == np.uint8
    assert colours[0, 0, 2] > colours[0, 0, 0] and colours[2, 3, 0] > colours[2, 3, 2]  # far blue, near red
    assert result.save(tmp_path / "d.png").is_file()
    assert isinstance(result.numpy().depth.data, np.ndarray)
    assert DepthMap(torch.zeros(2, 2)).colorize().shape == (2, 2, 3)  # a flat map draws, no division by zero
