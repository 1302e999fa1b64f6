"""EC matches upstream LibreYOLO: state-dict layout (every key, shape, dtype, in order, for every
size) and eval-mode numerics (size s, the "hash" deterministic weights, built for and run at
320 px) for detect. Pose and segment: see ``test_ec_tasks.py``.

The data under ``data/upstream/`` comes from upstream (``SOURCE-ec.md``); the fill is applied by
the rules its ``fill-*.tsv`` tables name (``upstream_fill_table.py``). README 8.6: the encoder
scores' float32 noise is 9e-3 (magnitude 4e3), the logits' 1.6e-3 (magnitude 5.5), the boxes' 2e-5.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from upstream_fill import DATA, layout_rows, read_manifest
from upstream_fill_table import check_fill_checksums, fill_from_table

from libreyolo_models.families.ec.family import ECFamily
from libreyolo_models.families.ec.nn import ECNet
from libreyolo_models.families.ec.variants import VARIANTS


@pytest.mark.parametrize("size", list(VARIANTS))
def test_state_dict_layout_matches_upstream_manifest(size: str) -> None:
    header, rows = read_manifest(f"ec-{size}")
    with torch.device("meta"):  # upstream's default build size, 640: 8400 anchors
        net = ECNet(size, nc=80)
    assert layout_rows(net) == rows
    assert sum(p.numel() for p in net.parameters()) == header["params"]  # up / reg_scale counted once
    assert net.decoder.up is net.decoder.decoder.up  # two keys, one tensor, as upstream stores them


@pytest.mark.parametrize("size", list(VARIANTS))
def test_size_and_classes_are_read_back_from_a_bare_upstream_state_dict(size: str) -> None:
    _, rows = read_manifest(f"ec-{size}")
    state = {key: torch.empty([int(d) for d in shape.split("x")] if shape != "scalar" else [], device="meta")
             for key, shape, _ in rows}
    assert ECFamily.infer_size(state, "detect") == size
    assert ECFamily.infer_nc(state, "detect") == 80


def test_hash_fill_reproduces_upstream_checksums() -> None:
    net = ECNet("s", nc=80, imgsz=(320, 320))
    fill_from_table(net, "ec-s")
    check_fill_checksums(net, "ec-s", every=3)


def test_forward_matches_upstream_hash_vectors() -> None:
    """Aligned by encoder token; 1e-2 on logits (README 8.6), 1e-4 on boxes."""
    ref = np.load(DATA / "vectors-ec-s-hash.npz", allow_pickle=False)
    assert list(ref["out_names"]) == ["pred_logits", "pred_boxes"]
    net = ECNet("s", nc=80, imgsz=(320, 320)).eval()
    fill_from_table(net, "ec-s")
    scores: list[torch.Tensor] = []
    hook = net.decoder.enc_score_head.register_forward_hook(lambda m, i, o: scores.append(o.max(-1).values))
    with torch.no_grad():
        out = net.upstream_outputs(torch.from_numpy(ref["input"]))
    hook.remove()
    torch.testing.assert_close(scores[0], torch.from_numpy(ref["aux_enc_score_max"]), rtol=1e-5, atol=2e-2)
    ours = scores[0].topk(300, dim=1).indices[0]
    theirs = torch.from_numpy(ref["aux_topk_index"])[0]
    assert set(ours.tolist()) == set(theirs.tolist())
    row_of = {token: row for row, token in enumerate(ours.tolist())}
    order = torch.tensor([row_of[t] for t in theirs.tolist()])
    torch.testing.assert_close(out["pred_logits"][0, order], torch.from_numpy(ref["out0"])[0], rtol=0, atol=1e-2)
    torch.testing.assert_close(out["pred_boxes"][0, order], torch.from_numpy(ref["out1"])[0], rtol=0, atol=1e-4)


def test_stored_anchors_are_read_only_at_the_build_size_in_eval() -> None:
    """Upstream's eval reads the ``anchors`` buffer (the vectors fill it with arbitrary values);
    another image size, or training, computes anchors for the actual maps."""
    torch.manual_seed(0)
    net = ECNet("s", nc=3, imgsz=(64, 64)).eval()
    with torch.no_grad():
        net.decoder.anchors.fill_(0.0)  # every stored anchor at the image centre
        at_build = net(torch.rand(1, 3, 64, 64))["pred_boxes"]
        elsewhere = net(torch.rand(1, 3, 96, 96))["pred_boxes"]
    assert at_build.shape == (1, 84, 4)  # 8x8 + 4x4 + 2x2 tokens: fewer than 300, all selected
    assert torch.allclose(at_build[..., :2], torch.full_like(at_build[..., :2], 0.5), atol=0.2)
    assert elsewhere.shape == (1, 189, 4) and elsewhere[..., 0].std() > 0.1
