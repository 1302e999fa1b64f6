"""YOLOX matches upstream LibreYOLO: state-dict layout (every key, shape, dtype, in order, for
n/t/s/m/l/x) and eval-mode numerics (size n, both deterministic fills, 320x320 input).

The data under ``data/upstream/`` comes from upstream; the fill rules are restated in
``upstream_fill.py``. Upstream's eval output is a list per level of ``[1, 85, H, W]``: raw tx, ty,
tw, th, then sigmoid objectness and sigmoid class scores, for input in upstream's own convention
(the vectors feed the network directly, no conversion).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from upstream_fill import DATA, fill_weights, layout_rows, read_manifest, vector_input

from libreyolo_models import LibreYOLO, LibreYOLOX
from libreyolo_models.families.yolox.family import YoloxFamily
from libreyolo_models.families.yolox.nn import YoloxNet, to_upstream_input


@pytest.mark.parametrize("size", ["n", "t", "s", "m", "l", "x"])
def test_state_dict_layout_matches_upstream_manifest(size: str) -> None:
    header, rows = read_manifest(f"yolox-{size}")
    with torch.device("meta"):  # shapes and dtypes only: no memory, no initialisation time
        model = YoloxNet(size, nc=80)
    ours = layout_rows(model)
    assert ours == rows
    assert sum(p.numel() for p in model.parameters()) == header["params"]
    assert len(ours) == header["entries"]
    assert YoloxFamily.infer_size(model.state_dict(), "detect") == size
    assert YoloxFamily.infer_nc(model.state_dict(), "detect") == 80


def test_every_batchnorm_uses_upstream_eps_and_momentum() -> None:
    norms = [m for m in YoloxNet("s").modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert norms and {(m.eps, m.momentum) for m in norms} == {(1e-3, 0.03)}


@pytest.mark.parametrize("variant", ["sine", "hash"])
def test_fill_reproduces_upstream_checksums(variant: str) -> None:
    model = YoloxNet("n", nc=80)
    fill_weights(model, variant)
    state = list(model.state_dict().items())
    rows = [line.split("\t") for line in (DATA / "fill-yolox-n.tsv").read_text().splitlines()[1:]]
    column = {"sine": 7, "hash": 10}[variant]
    for row in rows[:: max(1, len(rows) // 60)]:
        i, key = int(row[0]), row[1]
        assert state[i][0] == key
        if row[column + 1]:
            assert state[i][1].flatten()[0].item() == pytest.approx(float(row[column + 1]), abs=0)
            assert state[i][1].double().sum().item() == pytest.approx(float(row[column]), rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("file", ["vectors-yolox-n.npz", "vectors-yolox-n-hash.npz"])
def test_forward_matches_upstream_vectors(file: str) -> None:
    ref = np.load(DATA / file, allow_pickle=False)
    model = YoloxNet("n", nc=80).eval()
    fill_weights(model, "hash" if "hash" in file else "sine")
    assert torch.equal(vector_input(), torch.from_numpy(ref["input"]))  # the input rule, restated
    with torch.no_grad():
        levels = model.upstream_outputs(torch.from_numpy(ref["input"]))
    assert list(ref["out_names"]) == ["[0]", "[1]", "[2]"] and len(levels) == 3
    for i, got in enumerate(levels):
        torch.testing.assert_close(got, torch.from_numpy(ref[f"out{i}"]), rtol=0, atol=1e-5, msg=lambda m, i=i: f"[{i}]: {m}")


def test_predictions_decode_upstream_levels_from_cell_corners() -> None:
    """``predictions`` = upstream's decode: centre (t + g) * s, size exp(t) * s, score obj * cls."""
    torch.manual_seed(0)
    model = YoloxNet("n", nc=3).eval()
    images = torch.rand(1, 3, 96, 64)
    with torch.no_grad():
        predictions = model(images)["predictions"]
        levels = model.upstream_outputs(to_upstream_input(images))
    assert predictions.shape == (1, 4 + 3, 12 * 8 + 6 * 4 + 3 * 2)
    # Level 1 (stride 16), cell (y=2, x=3): anchor index 12*8 + 2*4 + 3.
    t = levels[1][0, :, 2, 3]
    cx, cy = (t[0] + 3) * 16, (t[1] + 2) * 16
    w, h = t[2].exp() * 16, t[3].exp() * 16
    expected = torch.stack((cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2, *(t[4] * t[5:])))
    torch.testing.assert_close(predictions[0, :, 96 + 8 + 3], expected)


def test_rgb_unit_input_reaches_the_network_as_upstream_bgr_pixels() -> None:
    images = torch.rand(1, 3, 4, 4)
    converted = to_upstream_input(images)
    torch.testing.assert_close(converted[:, 0], images[:, 2] * 255)
    torch.testing.assert_close(converted[:, 2], images[:, 0] * 255)


def test_train_and_eval_mode_return_the_same_structure() -> None:
    model = YoloxNet("n", nc=3)
    x = torch.rand(2, 3, 64, 96)
    train_out, eval_out = model.train()(x), model.eval()(x)
    assert train_out.keys() == eval_out.keys() == {"predictions", "raw_outputs"}
    assert train_out["predictions"].shape == (2, 4 + 3, 8 * 12 + 4 * 6 + 2 * 3)
    assert [r.shape[1:] for r in train_out["raw_outputs"]] == [(8, 8, 12), (8, 4, 6), (8, 2, 3)]


def test_names_build_every_size_with_upstream_default_image_sizes() -> None:
    assert LibreYOLO("LibreYOLOXn.yaml").imgsz == 416 and LibreYOLOX(size="t").imgsz == 416
    model = LibreYOLOX(nc=2)
    assert (model.spec.name, model.size, model.imgsz, model.nc) == ("yolox", "s", 640, 2)
