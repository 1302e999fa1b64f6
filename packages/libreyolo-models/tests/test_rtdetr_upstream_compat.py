"""RT-DETR matches upstream LibreYOLO: state-dict layout (every key, shape, dtype, in order, for
every size) and eval-mode numerics (r18, the "hash" deterministic weights, 320x320 input).

The data under ``data/upstream/`` comes from upstream; the fill rules are restated in
``upstream_fill.py``. The "sine" vectors are not used: their top-300 choice is decided by
rounding (see ``data/upstream/SOURCE.md``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from upstream_fill import DATA, fill_weights, layout_rows, read_manifest

from libreyolo_models.families.rtdetr.family import RTDETRFamily
from libreyolo_models.families.rtdetr.nn import RTDETRNet
from libreyolo_models.layers.detr.rtdetr_sizes import VARIANTS


@pytest.mark.parametrize("size", list(VARIANTS))
def test_state_dict_layout_matches_upstream_manifest(size: str) -> None:
    header, rows = read_manifest(f"rtdetr-{size}")
    with torch.device("meta"):  # shapes and dtypes only: the large sizes build in a second
        net = RTDETRNet(size, nc=80)
    assert layout_rows(net) == rows
    assert sum(p.numel() for p in net.parameters()) == header["params"]
    buffers = sum(b.numel() for b in net.buffers())
    assert buffers == header["buffers"]


@pytest.mark.parametrize("size", list(VARIANTS))
def test_size_and_classes_are_read_back_from_a_bare_upstream_state_dict(size: str) -> None:
    _, rows = read_manifest(f"rtdetr-{size}")
    state = {key: torch.empty([int(d) for d in shape.split("x")] if shape != "scalar" else [], device="meta")
             for key, shape, _ in rows}
    assert RTDETRFamily.infer_size(state, "detect") == size
    assert RTDETRFamily.infer_nc(state, "detect") == 80


def test_frozen_sizes_hold_their_backbone_norms_in_buffers_only() -> None:
    with torch.device("meta"):
        r18, r50 = RTDETRNet("r18"), RTDETRNet("r50")
    assert any(n.startswith("backbone.") and n.endswith("norm.weight") for n, _ in r18.named_parameters())
    assert not any(n.startswith("backbone.") and "norm" in n for n, _ in r50.named_parameters())
    assert "backbone.conv1.conv1_1.norm.running_var" in dict(r50.named_buffers())


def test_hash_fill_reproduces_upstream_checksums() -> None:
    net = RTDETRNet("r18", nc=80)
    fill_weights(net, "hash")
    state = list(net.state_dict().items())
    rows = [line.split("\t") for line in (DATA / "fill-rtdetr-r18.tsv").read_text().splitlines()[1:]]
    for row in rows[:: max(1, len(rows) // 60)]:  # a spread of entries across the network
        i, key, first_hash = int(row[0]), row[1], row[11]
        assert state[i][0] == key
        if first_hash:
            assert state[i][1].flatten()[0].item() == pytest.approx(float(first_hash), abs=0)
            assert state[i][1].double().sum().item() == pytest.approx(float(row[10]), rel=1e-9, abs=1e-9)


def test_forward_matches_upstream_hash_vectors() -> None:
    ref = np.load(DATA / "vectors-rtdetr-r18-hash.npz", allow_pickle=False)
    assert list(ref["out_names"]) == ["pred_logits", "pred_boxes"]
    net = RTDETRNet("r18", nc=80).eval()
    fill_weights(net, "hash")
    scores: list[torch.Tensor] = []
    hook = net.decoder.enc_score_head.register_forward_hook(lambda m, i, o: scores.append(o.max(-1).values))
    with torch.no_grad():
        out = net(torch.from_numpy(ref["input"]))
    hook.remove()
    torch.testing.assert_close(scores[0], torch.from_numpy(ref["aux_enc_score_max"]), rtol=0, atol=1e-4)
    ours = scores[0].topk(300, dim=1).indices[0]
    theirs = torch.from_numpy(ref["aux_topk_index"])[0]
    assert set(ours.tolist()) == set(theirs.tolist())  # the same 300 tokens became queries
    # Rows are queries in top-k order; adjacent scores can tie to 1e-5, so align rows by token.
    row_of = {token: row for row, token in enumerate(ours.tolist())}
    order = torch.tensor([row_of[t] for t in theirs.tolist()])
    logits, boxes = out["pred_logits"][0, order], out["pred_boxes"][0, order]
    torch.testing.assert_close(logits, torch.from_numpy(ref["out0"])[0], rtol=0, atol=1e-3)
    torch.testing.assert_close(boxes, torch.from_numpy(ref["out1"])[0], rtol=0, atol=1e-4)
    assert boxes.min() >= 0 and boxes.max() <= 1


def test_eval_forward_runs_only_up_to_the_inference_layer() -> None:
    """r50m infers from decoder layer 3 of 6, like upstream: the later layers are never run."""
    net = RTDETRNet("r50m", nc=3).eval()
    ran: list[int] = []
    for i, layer in enumerate(net.decoder.decoder.layers):
        layer.register_forward_hook(lambda m, a, o, i=i: ran.append(i))
    with torch.no_grad():
        out = net(torch.rand(1, 3, 128, 128))
    assert ran == [0, 1, 2]
    assert out["pred_logits"].shape == (1, 300, 3) and out["pred_boxes"].shape == (1, 300, 4)
