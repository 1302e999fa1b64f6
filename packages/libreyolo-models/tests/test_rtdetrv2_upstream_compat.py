"""RT-DETRv2 matches upstream LibreYOLO: the state-dict layout of every size (RT-DETR's backbone and
encoder, the v2 decoder keys and buffers) and the eval forward of r18 against the shared vectors
(320x320). Its hash vectors are healthy (README 8.6: the input reaches the outputs, the top-300 set
is stable), so rows are compared tightly after aligning them by ``aux_topk_index`` (adjacent scores
inside the set can tie). The sine fill ties its top-k scores: only the encoder scores are compared.
"""

from __future__ import annotations

import pytest
import torch
from detr_compat import assert_vectors, bare_state, check_layout, run_vectors

from libreyolo_models.families.rtdetrv2.family import RTDETRv2Family

SIZES = ("r18", "r34", "r50", "r50m", "r101")


@pytest.mark.parametrize("size", SIZES)
def test_state_dict_layout_matches_upstream_manifest(size: str) -> None:
    check_layout("rtdetrv2", size)


@pytest.mark.parametrize("size", SIZES)
def test_size_and_classes_are_read_back_from_a_bare_upstream_state_dict(size: str) -> None:
    state = bare_state("rtdetrv2", size)
    assert RTDETRv2Family.infer_size(state, "detect") == size
    assert RTDETRv2Family.infer_nc(state, "detect") == 80


def test_forward_matches_upstream_hash_vectors() -> None:
    assert_vectors("rtdetrv2", "r18", logits_atol=1e-3, boxes_atol=1e-4, scores_atol=1e-4)


def test_sine_vectors_agree_on_the_encoder_scores() -> None:
    _, scores, ref = run_vectors("rtdetrv2", "r18", "sine")
    torch.testing.assert_close(scores, torch.from_numpy(ref["aux_enc_score_max"]), rtol=0, atol=1e-4)
