"""RTMDet matches upstream LibreYOLO: state-dict layout (every key, shape, dtype, in order, for
t/s/m/l/x, with the head's shared convs listed under every level) and eval-mode numerics (size t,
both deterministic fills, 320x320 input).

The data under ``data/upstream/`` comes from upstream (``SOURCE-rtmdet.md``); the fill rules are
restated in ``upstream_fill.py``. Tolerances follow the data's notes: the f32-vs-f64 noise is at
most 2e-7 on class logits and 3.5e-6 on pixel distances (magnitudes up to ~8 px).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from upstream_fill import DATA, fill_weights, layout_rows, read_manifest, vector_input

from libreyolo_models.families.rtmdet.nn import RTMDetNet


@pytest.mark.parametrize("size", ["t", "s", "m", "l", "x"])
def test_state_dict_layout_matches_upstream_manifest(size: str) -> None:
    header, rows = read_manifest(f"rtmdet-{size}")
    with torch.device("meta"):  # shapes only: skips initialising up to 95M weights
        model = RTMDetNet(size, nc=80)
    ours = layout_rows(model)
    assert ours == rows
    assert sum(p.numel() for p in model.parameters()) == header["params"]  # shared convs counted once
    assert len(ours) == header["entries"]
    assert sum(v.numel() for v in model.state_dict().values()) == header["state_dict_numel"]


def test_head_convs_of_levels_1_and_2_are_the_level_0_tensors_with_their_own_batchnorms() -> None:
    head = RTMDetNet("t", nc=3).head
    for branch in (head.cls_convs, head.reg_convs):
        for level in (1, 2):
            for i in (0, 1):
                assert branch[level][i].conv.weight is branch[0][i].conv.weight
                assert branch[level][i].bn is not branch[0][i].bn
    state = RTMDetNet("t", nc=3).state_dict()
    assert "head.cls_convs.2.1.conv.weight" in state and "head.reg_convs.1.0.bn.running_var" in state


def test_loading_a_state_dict_writes_the_shared_conv_once_for_every_level() -> None:
    source, target = RTMDetNet("t", nc=3), RTMDetNet("t", nc=3)
    with torch.no_grad():
        source.head.cls_convs[0][0].conv.weight.fill_(0.25)
    target.load_state_dict(source.state_dict())
    assert torch.equal(target.head.cls_convs[2][0].conv.weight, torch.full_like(source.head.cls_convs[0][0].conv.weight, 0.25))


def test_hash_fill_reproduces_upstream_checksums_including_aliases() -> None:
    model = RTMDetNet("t", nc=80)
    fill_weights(model, "hash")
    state = list(model.state_dict().items())
    rows = [line.split("\t") for line in (DATA / "fill-rtmdet-t.tsv").read_text().splitlines()[1:]]
    aliases = [r for r in rows if r[4] == "alias"]
    assert len(aliases) == 8  # cls and reg, two convs, levels 1 and 2
    for row in rows[:: max(1, len(rows) // 60)] + aliases:
        i, key, first_hash = int(row[0]), row[1], row[11]
        assert state[i][0] == key
        if first_hash:
            assert state[i][1].flatten()[0].item() == pytest.approx(float(first_hash), abs=0)
            assert state[i][1].double().sum().item() == pytest.approx(float(row[10]), rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("variant", ["sine", "hash"])
def test_forward_matches_upstream_vectors(variant: str) -> None:
    suffix = "-hash" if variant == "hash" else ""
    ref = np.load(DATA / f"vectors-rtmdet-t{suffix}.npz", allow_pickle=False)
    model = RTMDetNet("t", nc=80).eval()
    fill_weights(model, variant)
    assert torch.equal(vector_input(), torch.from_numpy(ref["input"]))  # the input rule, restated
    with torch.no_grad():
        cls_scores, distances = model(torch.from_numpy(ref["input"]))
    got = [(f"[0][{i}]", t) for i, t in enumerate(cls_scores)] + [(f"[1][{i}]", t) for i, t in enumerate(distances)]
    assert [name for name, _ in got] == list(ref["out_names"])
    for i, (name, tensor) in enumerate(got):
        expected = torch.from_numpy(ref[f"out{i}"])
        atol = 1e-5 if name.startswith("[0]") else 5e-5
        torch.testing.assert_close(tensor, expected, rtol=0, atol=atol, msg=lambda m, n=name: f"{n}: {m}")


def test_large_sizes_put_distances_through_exp_and_small_ones_do_not() -> None:
    x = torch.zeros(1, 3, 64, 64)
    for size, positive_only in (("t", False), ("m", True)):
        model = RTMDetNet(size, nc=2).eval()
        with torch.no_grad():
            for conv in model.head.rtm_reg:
                conv.weight.zero_()
                conv.bias.fill_(-1.0)
            _, distances = model(x)
        # reg = -1 everywhere: t/s give -stride, m/l/x exp(-1) * stride.
        for d, stride in zip(distances, (8, 16, 32)):
            expected = stride * (np.exp(-1.0) if positive_only else -1.0)
            torch.testing.assert_close(d, torch.full_like(d, expected), rtol=1e-6, atol=1e-5)
