"""Classification metrics on hand-worked cases, and against scikit-learn's independent computation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.metrics import balanced_accuracy_score, confusion_matrix, top_k_accuracy_score

from libreyolo_models.tasks.classify.metrics import ClassifyCounter, truth_rank

NAMES = {0: "cat", 1: "dog", 2: "fox", 3: "owl", 4: "yak", 5: "elk"}


def _metrics(scores: list[list[float]], labels: list[int], nc: int = 6):
    counter = ClassifyCounter(nc)
    counter.update(torch.tensor(scores), torch.tensor(labels))
    return counter.result({i: NAMES[i] for i in range(nc)})


def test_ties_rank_the_lower_class_id_first() -> None:
    # Image 0: classes 1 and 2 tie for the best score; the truth is 2, so class 1 ranks first.
    # Image 1: the same tie with the truth 1: a top-1 hit.
    scores = [[0.0, 0.5, 0.5, 0.0, 0.0, 0.0], [0.0, 0.5, 0.5, 0.0, 0.0, 0.0]]
    assert truth_rank(torch.tensor(scores), torch.tensor([2, 1])).tolist() == [1, 0]
    m = _metrics(scores, [2, 1])
    assert m.top1 == 0.5 and m.top5 == 1.0
    assert m.confusion[2, 1] == 1 and m.confusion[1, 1] == 1  # the miss is predicted as class 1


def test_top5_with_six_classes_tied_at_the_edge() -> None:
    # All six scores equal: ranks follow the class id, so only class 5 falls outside the top 5.
    flat = [[0.1] * 6] * 3
    m = _metrics(flat, [0, 4, 5])
    assert m.top1 == pytest.approx(1 / 3) and m.top5 == pytest.approx(2 / 3)


def test_a_class_absent_from_val_has_no_accuracy_and_leaves_the_mean_alone() -> None:
    # nc=3; class 2 never appears. cat: 2 images, 1 right; dog: 1 image, right.
    scores = [[2.0, 1.0, 0.0], [0.0, 1.0, 3.0], [0.0, 5.0, 1.0]]
    m = _metrics(scores, [0, 0, 1], nc=3)
    assert m.support.tolist() == [2, 1, 0]
    assert m.per_class[0] == 0.5 and m.per_class[1] == 1.0 and math.isnan(m.per_class[2])
    assert m.mean_class_accuracy == pytest.approx(0.75)
    assert m.top1 == pytest.approx(2 / 3) and m.top5 == 1.0  # nc < 5: top-5 is top-3
    assert m.fitness == m.top1
    assert m.as_dict()["metrics/accuracy_top1"] == pytest.approx(2 / 3)
    row = next(line for line in m.table().splitlines() if line.startswith("fox"))
    assert row.split() == ["fox", "0", "-"]
    assert "1 classes absent" in m.summary()


def test_counts_accumulate_over_batches_like_one_batch() -> None:
    g = torch.Generator().manual_seed(0)
    scores, labels = torch.randn(40, 6, generator=g), torch.randint(0, 6, (40,), generator=g)
    whole, parts = ClassifyCounter(6), ClassifyCounter(6)
    whole.update(scores, labels)
    for lo in range(0, 40, 7):
        parts.update(scores[lo:lo + 7], labels[lo:lo + 7])
    assert torch.equal(whole.confusion, parts.confusion) and whole.topk_hits == parts.topk_hits


@pytest.mark.filterwarnings("ignore:y_pred contains classes not in y_true")
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_scikit_learn_on_random_scores(seed: int) -> None:
    rng = np.random.default_rng(seed)
    nc, n = 12, 500
    labels = rng.integers(0, nc - 1, n)  # the last class never occurs
    scores = rng.normal(size=(n, nc)) + np.eye(nc)[labels] * rng.uniform(0, 3)
    counter = ClassifyCounter(nc)
    counter.update(torch.from_numpy(scores), torch.from_numpy(labels))
    m = counter.result({i: str(i) for i in range(nc)})
    ids = list(range(nc))
    assert m.top1 == pytest.approx(top_k_accuracy_score(labels, scores, k=1, labels=ids))
    assert m.top5 == pytest.approx(top_k_accuracy_score(labels, scores, k=5, labels=ids))
    assert np.array_equal(m.confusion, confusion_matrix(labels, scores.argmax(1), labels=ids))
    assert m.mean_class_accuracy == pytest.approx(balanced_accuracy_score(labels, scores.argmax(1)))
