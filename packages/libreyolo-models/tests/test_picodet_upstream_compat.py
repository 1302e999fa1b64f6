"""PicoDet matches upstream LibreYOLO: state-dict layout (every key, shape, dtype, in order, for s/m/l)
and eval-mode numerics (size s, both deterministic fills, 320x320 input, four levels).

The data under ``data/upstream/`` comes from upstream (``SOURCE-yolonas-picodet.md``); the fill
rules are restated in ``upstream_fill.py``. Upstream's eval output is ``(class logits, box-side
logits)`` per level (strides 8, 16, 32, 64), for ImageNet-normalised RGB input (the network's
``upstream_outputs``; the zoo's seams normalise RGB in [0, 1] inside). The vectors are well conditioned
(float32 noise <= 2.4e-7 on magnitudes below 0.4): absolute tolerance 1e-5.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from upstream_fill import DATA, fill_weights, layout_rows, read_manifest, vector_input

from libreyolo_models.families.picodet.family import PicoDetFamily
from libreyolo_models.families.picodet.nn import MEAN_RGB, STD_RGB, PicoDetNet


@pytest.mark.parametrize("size", ["s", "m", "l"])
def test_state_dict_layout_matches_upstream_manifest(size: str) -> None:
    header, rows = read_manifest(f"picodet-{size}")
    with torch.device("meta"):
        model = PicoDetNet(size, nc=80)
    ours = layout_rows(model)
    assert ours == rows
    assert sum(p.numel() for p in model.parameters()) == header["params"]
    assert len(ours) == header["entries"]
    assert PicoDetFamily.infer_size(model.state_dict(), "detect") == size
    assert PicoDetFamily.infer_nc(model.state_dict(), "detect") == 80


def test_every_batchnorm_uses_torchs_defaults() -> None:
    norms = [m for m in PicoDetNet("s", nc=3).modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert len(norms) > 100 and {(m.eps, m.momentum) for m in norms} == {(1e-5, 0.1)}


def test_hash_fill_reproduces_upstream_checksums() -> None:
    model = PicoDetNet("s", nc=80)
    fill_weights(model, "hash")
    state = list(model.state_dict().items())
    rows = [line.split("\t") for line in (DATA / "fill-picodet-s.tsv").read_text().splitlines()[1:]]
    for row in rows[:: max(1, len(rows) // 60)]:
        i, key, first_hash = int(row[0]), row[1], row[11]
        assert state[i][0] == key
        if first_hash:
            assert state[i][1].flatten()[0].item() == pytest.approx(float(first_hash), abs=0)
            assert state[i][1].double().sum().item() == pytest.approx(float(row[10]), rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("variant", ["sine", "hash"])
def test_forward_matches_upstream_vectors(variant: str) -> None:
    ref = np.load(DATA / f"vectors-picodet-s{'-hash' if variant == 'hash' else ''}.npz", allow_pickle=False)
    model = PicoDetNet("s", nc=80).eval()
    fill_weights(model, variant)
    assert torch.equal(vector_input(), torch.from_numpy(ref["input"]))
    with torch.no_grad():
        cls_scores, box_logits = model.upstream_outputs(torch.from_numpy(ref["input"]))
    got = [(f"[0][{i}]", t) for i, t in enumerate(cls_scores)] + [(f"[1][{i}]", t) for i, t in enumerate(box_logits)]
    assert [name for name, _ in got] == list(ref["out_names"])
    assert [t.shape[2] for _, t in got[:4]] == [40, 20, 10, 5]
    for i, (name, tensor) in enumerate(got):
        torch.testing.assert_close(tensor, torch.from_numpy(ref[f"out{i}"]), rtol=0, atol=1e-5,
                                   msg=lambda m, n=name: f"{n}: {m}")


def test_zoo_input_is_normalised_inside_the_network() -> None:
    torch.manual_seed(0)
    model = PicoDetNet("s", nc=2).eval()
    images = torch.rand(1, 3, 64, 64)
    normalised = (images - torch.tensor(MEAN_RGB).view(1, 3, 1, 1)) / torch.tensor(STD_RGB).view(1, 3, 1, 1)
    with torch.no_grad():
        ours = model.raw_outputs(images)
        cls_scores, box_logits = model.upstream_outputs(normalised)
    for mine, c, b in zip(ours, cls_scores, box_logits):
        torch.testing.assert_close(mine, torch.cat((c, b), 1))


def test_predictions_decode_from_cell_centres_on_four_levels() -> None:
    """``[B, 4 + nc, A]``: (cell centre -/+ the 8-bin DFL expectation) x stride, sigmoid scores. At
    416 px the fourth level is 7 x 7 (a padded stride-2 conv on 13 x 13), as upstream's."""
    torch.manual_seed(0)
    model = PicoDetNet("s", nc=2).eval()
    images = torch.rand(1, 3, 96, 64)
    with torch.no_grad():
        raw = model.raw_outputs(images)
        predictions = model.predictions(images)
        sizes = [r.shape[2:] for r in model.raw_outputs(torch.zeros(1, 3, 416, 416))]
    assert [tuple(s) for s in sizes] == [(52, 52), (26, 26), (13, 13), (7, 7)]
    assert predictions.shape == (1, 4 + 2, 12 * 8 + 6 * 4 + 3 * 2 + 2 * 1)
    # Level 3 (stride 64), cell (y=1, x=0): the last anchor of all.
    cell = raw[3][0, :, 1, 0]
    dist = (cell[2:].view(4, 8).softmax(1) * torch.arange(8.0)).sum(1)
    cx, cy = 0.5, 1.5
    expected = torch.cat((torch.stack((cx - dist[0], cy - dist[1], cx + dist[2], cy + dist[3])) * 64, cell[:2].sigmoid()))
    torch.testing.assert_close(predictions[0, :, -1], expected)


def test_bo_style_mmdetection_keys_are_renamed_on_load() -> None:
    """Bo396543018's PyTorch PicoDet names (``bbox_head.``, per-stage ES blocks ``backbone.3_2.``,
    ``neck.trans.trans.``, mmcv's ``se.conv1.conv.``) map onto ours; its EMA copies and the DFL
    projection buffer are dropped."""
    ours = PicoDetNet("s", nc=3).state_dict()
    flat_to_stage = {i: f"{stage}_{j}" for i, (stage, j) in enumerate(
        [(2, j) for j in range(1, 4)] + [(3, j) for j in range(1, 8)] + [(4, j) for j in range(1, 4)])}
    theirs = {}
    for key, value in ours.items():
        key = key.replace("head.", "bbox_head.", 1) if key.startswith("head.") else key
        key = key.replace("neck.trans.", "neck.trans.trans.", 1)
        key = key.replace(".se.conv1.", ".se.conv1.conv.").replace(".se.conv2.", ".se.conv2.conv.")
        if key.startswith("backbone.blocks."):
            index, rest = key[len("backbone.blocks."):].split(".", 1)
            key = f"backbone.{flat_to_stage[int(index)]}.{rest}"
        theirs[key] = value
    theirs["ema_backbone_conv1_conv_weight"] = torch.zeros(1)
    theirs["bbox_head.integral.project"] = torch.arange(8.0)
    remapped = PicoDetFamily.remap_state(theirs)
    assert list(remapped) == list(ours)
