"""YOLO-NAS matches upstream LibreYOLO: state-dict layout (every key, shape, dtype, in order, for
s/m/l detect) and eval-mode numerics (size s, both deterministic fills, 320x320 input).

The data under ``data/upstream/`` comes from upstream (``SOURCE-yolonas-picodet.md``); the fill
rules are restated in ``upstream_fill.py``. Upstream's eval output is a nested tuple: decoded
boxes and sigmoid scores, then raw class logits, raw DFL logits, ATSS anchor boxes, cell centres,
(anchor counts,) strides. Tolerances follow the data's notes: under the hash fill the activations
explode (raw logits ~1e7, float32 noise ~2e-6 of that), so raw maps are compared relative to their
magnitude (1e-4) while the decoded boxes and scores are saturated and exact; the sine fill keeps
magnitudes below 1 and takes absolute tolerances (1e-5 maps, 1e-3 pixels).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from upstream_fill import DATA, fill_weights, layout_rows, read_manifest, vector_input

from libreyolo_models.families.yolonas.family import YoloNasFamily
from libreyolo_models.families.yolonas.nn import YoloNasNet

LEAVES = ["[0][0]", "[0][1]", "[1][0]", "[1][1]", "[1][2]", "[1][3]", "[1][5]"]  # [1][4]: counts, not a tensor


@pytest.mark.parametrize("size", ["s", "m", "l"])
def test_state_dict_layout_matches_upstream_manifest(size: str) -> None:
    header, rows = read_manifest(f"yolonas-{size}")
    with torch.device("meta"):  # shapes only: skips initialising up to 67M weights
        model = YoloNasNet(size, nc=80)
    ours = layout_rows(model)
    assert ours == rows
    assert sum(p.numel() for p in model.parameters()) == header["params"]  # rbr_reparam included (frozen)
    assert len(ours) == header["entries"]
    assert YoloNasFamily.infer_size(model.state_dict(), "detect") == size
    assert YoloNasFamily.infer_nc(model.state_dict(), "detect") == 80


def test_every_batchnorm_uses_upstream_eps_and_momentum() -> None:
    norms = [m for m in YoloNasNet("s", nc=3).modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert len(norms) > 100 and {(m.eps, m.momentum) for m in norms} == {(1e-3, 0.03)}


def test_hash_fill_reproduces_upstream_checksums() -> None:
    model = YoloNasNet("s", nc=80)
    fill_weights(model, "hash")
    state = list(model.state_dict().items())
    rows = [line.split("\t") for line in (DATA / "fill-yolonas-s.tsv").read_text().splitlines()[1:]]
    alphas = [r for r in rows if r[1].endswith(".alpha")]
    for row in rows[:: max(1, len(rows) // 60)] + alphas[:3]:
        i, key, first_hash = int(row[0]), row[1], row[11]
        assert state[i][0] == key
        if first_hash:
            assert state[i][1].flatten()[0].item() == pytest.approx(float(first_hash), abs=0)
            assert state[i][1].double().sum().item() == pytest.approx(float(row[10]), rel=1e-9, abs=1e-9)


def _leaves(out: tuple) -> list[torch.Tensor]:
    (boxes, scores), raw = out
    assert isinstance(raw[4], tuple) and raw[4] == (1600, 400, 100)  # per-level anchor counts at 320
    return [boxes, scores, raw[0], raw[1], raw[2], raw[3], raw[5]]


@pytest.mark.parametrize("variant", ["sine", "hash"])
def test_forward_matches_upstream_vectors(variant: str) -> None:
    ref = np.load(DATA / f"vectors-yolonas-s{'-hash' if variant == 'hash' else ''}.npz", allow_pickle=False)
    model = YoloNasNet("s", nc=80).eval()
    fill_weights(model, variant)
    assert torch.equal(vector_input(), torch.from_numpy(ref["input"]))  # the input rule, restated
    with torch.no_grad():
        got = _leaves(model.upstream_outputs(torch.from_numpy(ref["input"])))
    assert list(ref["out_names"]) == LEAVES
    for i, (name, tensor) in enumerate(zip(LEAVES, got)):
        expected = torch.from_numpy(ref[f"out{i}"])
        if variant == "hash" and name in ("[1][0]", "[1][1]"):  # raw logits up to 2.6e7: relative
            atol = 1e-4 * expected.abs().max().item()
        elif name == "[0][0]":  # boxes in pixels (saturated, one-hot DFL, under the hash fill)
            atol = 1e-3
        else:
            atol = 1e-5
        torch.testing.assert_close(tensor, expected, rtol=0, atol=atol, msg=lambda m, n=name: f"{n}: {m}")


def test_predictions_decode_the_raw_maps_from_cell_centres() -> None:
    """``predictions`` = upstream's decode: (cell centre -/+ DFL expectation) x stride, sigmoid scores."""
    torch.manual_seed(0)
    model = YoloNasNet("s", nc=3).eval()
    images = torch.rand(1, 3, 96, 64)
    with torch.no_grad():
        out = model(images)
    raw, predictions = out["raw_outputs"], out["predictions"]
    assert [r.shape[1:] for r in raw] == [(71, 12, 8), (71, 6, 4), (71, 3, 2)]
    assert predictions.shape == (1, 4 + 3, 12 * 8 + 6 * 4 + 3 * 2)
    # Level 1 (stride 16), cell (y=2, x=3): anchor index 12*8 + 2*4 + 3.
    cell = raw[1][0, :, 2, 3]
    dist = (cell[:68].view(4, 17).softmax(1) * torch.arange(17.0)).sum(1)
    cx, cy = 3.5, 2.5
    expected = torch.cat((torch.stack((cx - dist[0], cy - dist[1], cx + dist[2], cy + dist[3])) * 16, cell[68:].sigmoid()))
    torch.testing.assert_close(predictions[0, :, 96 + 8 + 3], expected)


def test_train_and_eval_mode_return_the_same_structure() -> None:
    model = YoloNasNet("s", nc=2)
    x = torch.rand(1, 3, 64, 32)
    train_out, eval_out = model.train()(x), model.eval()(x)
    assert train_out.keys() == eval_out.keys() == {"predictions", "raw_outputs"}
    assert [r.shape for r in train_out["raw_outputs"]] == [r.shape for r in eval_out["raw_outputs"]]
