"""YOLOv9-E2E matches upstream LibreYOLO: state-dict layout (every key, shape, dtype, in order, for
t/s/m/c) and eval-mode numerics (size t, the "hash" deterministic weights, 320x320 input), from
the one-to-one branch as upstream's eval forward computes them.

Data: ``data/upstream/*yolo9_e2e*`` (see ``SOURCE-yolo9_e2e.md``); fill rules in ``upstream_fill.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from upstream_fill import DATA, fill_weights, layout_rows, read_manifest, vector_input

from libreyolo_models.families.yolo9_e2e.nn import Yolo9E2ENet


def leaves(outputs: dict) -> list[tuple[str, torch.Tensor]]:
    found = [("predictions", outputs["predictions"])]
    found += [(f"raw_outputs[{i}]", t) for i, t in enumerate(outputs["raw_outputs"])]
    found += [(f"{name}.features", outputs[name]["features"]) for name in ("x8", "x16", "x32")]
    return found


@pytest.mark.parametrize("size", ["t", "s", "m", "c"])
def test_state_dict_layout_matches_upstream_manifest(size: str) -> None:
    header, rows = read_manifest(f"yolo9_e2e-{size}")
    with torch.device("meta"):  # shapes only: the big sizes build in milliseconds
        model = Yolo9E2ENet(size, nc=80)
    assert layout_rows(model) == rows
    assert sum(p.numel() for p in model.parameters()) == header["params"]
    assert len(rows) == header["entries"]


def test_hash_fill_reproduces_upstream_checksums() -> None:
    model = Yolo9E2ENet("t", nc=80)
    fill_weights(model, "hash")
    state = list(model.state_dict().items())
    rows = [line.split("\t") for line in (DATA / "fill-yolo9_e2e-t.tsv").read_text().splitlines()[1:]]
    for row in rows[:: max(1, len(rows) // 60)]:
        i, key, first_hash = int(row[0]), row[1], row[11]
        assert state[i][0] == key
        if first_hash:
            assert state[i][1].flatten()[0].item() == pytest.approx(float(first_hash), abs=0)
            assert state[i][1].double().sum().item() == pytest.approx(float(row[10]), rel=1e-9, abs=1e-9)


def test_forward_matches_upstream_hash_vectors() -> None:
    """README section 8.6: healthy (f32-vs-f64 noise 6.9e-5 on pixel predictions of scale 540,
    1.8e-7 on maps); tolerances 1e-3 on pixel-space predictions, 1e-5 on the maps."""
    ref = np.load(DATA / "vectors-yolo9_e2e-t-hash.npz", allow_pickle=False)
    model = Yolo9E2ENet("t", nc=80).eval()
    fill_weights(model, "hash")
    assert torch.equal(vector_input(), torch.from_numpy(ref["input"]))
    with torch.no_grad():
        got = leaves(model(torch.from_numpy(ref["input"])))
    assert [name for name, _ in got] == list(ref["out_names"])
    for i, (name, tensor) in enumerate(got):
        expected = torch.from_numpy(ref[f"out{i}"])
        assert tensor.shape == expected.shape, name
        atol = 1e-3 if name == "predictions" else 1e-5
        torch.testing.assert_close(tensor, expected, rtol=0, atol=atol, msg=lambda m, n=name: f"{n}: {m}")


def test_the_vectors_come_from_the_one_to_one_branch() -> None:
    """Control: the dense branch's maps differ from the vectors, so the check above could fail."""
    ref = np.load(DATA / "vectors-yolo9_e2e-t-hash.npz", allow_pickle=False)
    model = Yolo9E2ENet("t", nc=80).eval()
    fill_weights(model, "hash")
    with torch.no_grad():
        dense = model.head.raw_maps(model.neck(*model.backbone(torch.from_numpy(ref["input"]))))
    assert (dense[0] - torch.from_numpy(ref["out1"])).abs().max() > 1e-2
