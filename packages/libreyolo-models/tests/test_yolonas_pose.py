"""The YOLO-NAS-Pose network on its own (the zoo has no pose task yet): upstream's layout for n, s, m
and l (one person class, 17 keypoints), size n's eval-mode outputs under both fills, its BGR input
convention, and the decoded layout a pose task will read.

Tolerances as in ``test_yolonas_upstream_compat.py``: under the hash fill raw maps and keypoints are
compared relative to their magnitude (1e-4; noise ~3e-6 of magnitudes up to 8e7), boxes and the
saturated scores exactly; the sine fill absolutely.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from upstream_fill import DATA, fill_weights, layout_rows, read_manifest, vector_input

from libreyolo_models.families.yolonas.pose import YoloNasPoseNet

LEAVES = ["[0][0]", "[0][1]", "[0][2]", "[0][3]", "[1][0]", "[1][1]", "[1][2]", "[1][3]", "[1][4]", "[1][5]", "[1][7]"]


@pytest.mark.parametrize("size", ["n", "s", "m", "l"])
def test_state_dict_layout_matches_upstream_pose_manifest(size: str) -> None:
    header, rows = read_manifest(f"yolonas-{size}-pose")
    with torch.device("meta"):
        model = YoloNasPoseNet(size)
    ours = layout_rows(model)
    assert ours == rows
    assert sum(p.numel() for p in model.parameters()) == header["params"]
    assert len(ours) == header["entries"]


@pytest.mark.parametrize("variant", ["sine", "hash"])
def test_pose_forward_matches_upstream_vectors(variant: str) -> None:
    ref = np.load(DATA / f"vectors-yolonas-n-pose{'-hash' if variant == 'hash' else ''}.npz", allow_pickle=False)
    model = YoloNasPoseNet("n").eval()
    fill_weights(model, variant)
    assert torch.equal(vector_input(), torch.from_numpy(ref["input"]))
    with torch.no_grad():
        decoded, raw = model.upstream_outputs(torch.from_numpy(ref["input"]))
    assert raw[2] is decoded[2] and raw[6] == (1600, 400, 100)  # keypoints: one tensor; counts: not one
    got = [*decoded, *raw[:6], raw[7]]
    assert list(ref["out_names"]) == LEAVES
    for i, (name, tensor) in enumerate(zip(LEAVES, got)):
        expected = torch.from_numpy(ref[f"out{i}"])
        if name in ("[0][0]", "[0][2]", "[1][2]"):  # pixels
            atol = 1e-3 if variant == "sine" or name == "[0][0]" else 1e-4 * expected.abs().max().item()
        elif variant == "hash" and name in ("[1][0]", "[1][1]", "[1][3]"):  # raw logits up to 5e6
            atol = 1e-4 * expected.abs().max().item()
        else:
            atol = 1e-5
        torch.testing.assert_close(tensor, expected, rtol=0, atol=atol, msg=lambda m, n=name: f"{n}: {m}")


def test_zoo_input_is_rgb_and_upstream_input_bgr() -> None:
    torch.manual_seed(0)
    model = YoloNasPoseNet("n", num_keypoints=4).eval()
    images = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        ours = model.raw_outputs(images)
        theirs = model.heads.raw_maps(model.neck(model.backbone(images.flip(1))))
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)


def test_predictions_hold_box_score_and_keypoint_triples() -> None:
    """``predictions [B, 4 + 1 + 3K, A]``: keypoint k at rows 5 + 3k (x), 6 + 3k (y) in pixels
    ((offset + cell index) x stride) and 7 + 3k (sigmoid visibility)."""
    torch.manual_seed(1)
    k = 3
    model = YoloNasPoseNet("n", num_keypoints=k).eval()
    with torch.no_grad():
        out = model(torch.rand(2, 3, 64, 96))
    raw, predictions = out["raw_outputs"], out["predictions"]
    assert [r.shape[1:] for r in raw] == [(68 + 1 + 3 * k, 8, 12), (68 + 1 + 3 * k, 4, 6), (68 + 1 + 3 * k, 2, 3)]
    assert predictions.shape == (2, 4 + 1 + 3 * k, 8 * 12 + 4 * 6 + 2 * 3)
    # Level 0 (stride 8), cell (y=5, x=7): anchor 5 * 12 + 7.
    cell = raw[0][1, :, 5, 7]
    offsets = cell[68 + 1 + k:].view(k, 2)
    column = predictions[1, :, 5 * 12 + 7]
    torch.testing.assert_close(column[4], cell[68].sigmoid())
    for j in range(k):
        torch.testing.assert_close(column[5 + 3 * j], (offsets[j, 0] + 7) * 8)
        torch.testing.assert_close(column[6 + 3 * j], (offsets[j, 1] + 5) * 8)
        torch.testing.assert_close(column[7 + 3 * j], cell[69 + j].sigmoid())


def test_pose_sizes_are_checked() -> None:
    with pytest.raises(ValueError, match="known sizes: n, s, m, l"):
        YoloNasPoseNet("x")
