"""Detection metrics: hand-computed AP cases, matching rules, P/R choice, rank merging, errors."""

from __future__ import annotations

import logging
import pickle

import numpy as np
import pytest

from libreyolo_models import LibreYOLOError
from libreyolo_models.tasks.detect.matching import IOU_THRESHOLDS, ImageStats, match_image, pairwise_iou
from libreyolo_models.tasks.detect.metrics import DetectionMetrics, MetricsResult

T = len(IOU_THRESHOLDS)


def _stats(tp_rows, conf, cls, gt_cls, image_id=-1) -> ImageStats:
    """ImageStats from per-detection TP flags that hold at every threshold (for AP arithmetic)."""
    tp = np.repeat(np.asarray(tp_rows, dtype=bool).reshape(-1, 1), T, axis=1)
    return ImageStats(tp, np.asarray(conf, np.float32), np.asarray(cls), np.asarray(gt_cls), image_id)


def _compute(nc, *stats) -> MetricsResult:
    metrics = DetectionMetrics(nc, [f"c{i}" for i in range(nc)])
    metrics.update(stats)
    return metrics.compute()


# ---------------------------------------------------------------- AP arithmetic, by hand


def test_ap_of_tp_fp_tp_ranking_is_coco_101_point_value():
    # 2 GT; ranked TP, FP, TP -> precision 1, 1/2, 2/3 (envelope 1, 2/3, 2/3), recall .5, .5, 1.
    # Recall points 0.00..0.50 (51 of them) sample precision 1, 0.51..1.00 (50) sample 2/3.
    result = _compute(1, _stats([1, 0, 1], [0.9, 0.8, 0.7], [0, 0, 0], [0, 0]))
    expected = (51 * 1.0 + 50 * (2 / 3)) / 101
    assert result.map50 == pytest.approx(expected, abs=1e-12)
    assert result.map50_95 == pytest.approx(expected, abs=1e-12)


def test_recall_points_past_highest_recall_sample_zero():
    # 2 GT, one TP: recall tops out at 0.5, so only 51 of the 101 points score precision 1.
    result = _compute(1, _stats([1], [0.9], [0], [0, 0]))
    assert result.map50 == pytest.approx(51 / 101, abs=1e-12)


def test_low_scored_false_positives_after_full_recall_do_not_lower_ap():
    result = _compute(1, _stats([1, 1, 0, 0], [0.9, 0.8, 0.2, 0.1], [0, 0, 0, 0], [0, 0]))
    assert result.map50 == pytest.approx(1.0, abs=1e-12)


def test_higher_scored_false_positive_lowers_ap():
    result = _compute(1, _stats([0, 1], [0.9, 0.8], [0, 0], [0]))
    # precision at recall 1 is 1/2 and is the envelope everywhere
    assert result.map50 == pytest.approx(0.5, abs=1e-12)


def test_perfect_detections_score_one_everywhere():
    gt = np.array([[0, 0, 10, 10], [20, 20, 40, 50]], float)
    stats = match_image(gt, [0.9, 0.8], [0, 1], gt, [0, 1])
    result = _compute(2, stats)
    # 1 - 2e-16, not 1: COCOeval's eps in TP / (TP + FP + eps), kept for bit-level agreement
    assert (result.map50, result.map50_95, result.precision, result.recall) == pytest.approx((1, 1, 1, 1))


def test_iou_of_0_62_is_tp_at_three_of_ten_thresholds():
    stats = match_image([[0, 0, 100, 62]], [0.9], [0], [[0, 0, 100, 100]], [0])
    assert stats.tp[0].tolist() == [True, True, True] + [False] * 7
    result = _compute(1, stats)
    assert result.map50 == pytest.approx(1.0)
    assert result.map50_95 == pytest.approx(0.3, abs=1e-12)


def test_ap50_95_is_mean_of_per_threshold_aps():
    a = match_image([[0, 0, 100, 62]], [0.9], [0], [[0, 0, 100, 100]], [0], image_id=0)  # IoU .62
    b = match_image([[0, 0, 100, 88]], [0.5], [0], [[0, 0, 100, 100]], [0], image_id=1)  # IoU .88
    result = _compute(1, a, b)
    # 0.50-0.60: both TP -> AP 1. 0.65-0.85: ranked (FP, TP) -> precision (0, 1/2), envelope 1/2
    # up to recall 1/2 (51 points), 0 past it. 0.90, 0.95: both FP -> 0.
    per_t = [1.0] * 3 + [51 * 0.5 / 101] * 5 + [0.0] * 2
    assert result.map50 == pytest.approx(1.0)
    assert result.map50_95 == pytest.approx(np.mean(per_t), abs=1e-12)


# ---------------------------------------------------------------- matching rules


def test_detection_takes_highest_iou_gt_leaving_the_other_for_later_detections():
    gt = [[0, 0, 10, 10], [5, 0, 15, 10]]
    # first detection: IoU 0.54 with gt0, 0.67 with gt1 -> takes gt1; second is an exact gt0
    stats = match_image([[3, 0, 13, 10], [0, 0, 10, 10]], [0.9, 0.8], [0, 0], gt, [0, 0])
    assert stats.tp[1].all()
    assert stats.tp[0].tolist() == [True] * 4 + [False] * 6  # 0.667 >= 0.65, < 0.70


def test_matching_is_greedy_by_score_not_an_optimal_assignment():
    gt = [[0, 0, 10, 10], [6, 0, 16, 10]]
    # the 0.9 detection takes gt0 (IoU .67); the better-fitting 0.8 one (IoU .82 with gt0) is
    # left with gt1 at IoU 0.33 -> false positive, as in COCOeval
    stats = match_image([[2, 0, 12, 10], [1, 0, 11, 10]], [0.9, 0.8], [0, 0], gt, [0, 0])
    assert stats.tp[0, 0] and not stats.tp[1, 0]


def test_equal_scores_are_visited_in_input_order():
    gt = [[0, 0, 10, 10]]
    stats = match_image([[0, 0, 10, 9], [0, 0, 10, 10]], [0.5, 0.5], [0, 0], gt, [0])
    assert stats.tp[:, 0].tolist() == [True, False]


def test_equal_iou_tie_goes_to_the_later_gt_box_as_cocoeval():
    gt = [[0, 0, 10, 5], [0, 5, 10, 10]]  # the first detection has IoU exactly 0.5 with both
    stats = match_image([[0, 0, 10, 10], [0, 5, 10, 10]], [0.9, 0.8], [0, 0], gt, [0, 0])
    # at 0.50 the first takes gt1 (the later), so the exact copy of gt1 finds nothing left
    assert stats.tp[:, 0].tolist() == [True, False]
    # at 0.55 the first matches nothing and the copy takes gt1
    assert stats.tp[:, 1].tolist() == [False, True]


def test_wrong_class_detection_is_false_positive_even_at_iou_one():
    stats = match_image([[0, 0, 10, 10]], [0.9], [1], [[0, 0, 10, 10]], [0])
    assert not stats.tp.any()
    result = _compute(2, stats)
    assert result.map50 == 0.0 and set(result.per_class) == {0}


def test_duplicate_detections_of_one_object_count_one_tp():
    gt = [[0, 0, 10, 10]]
    stats = match_image(
        [[0, 0, 10, 10], [0, 0, 10, 10.5], [0, 0, 10.5, 10]], [0.9, 0.8, 0.7], [0] * 3, gt, [0]
    )
    assert stats.tp[:, 0].tolist() == [True, False, False]


def test_iou_has_no_plus_one_pixel_and_is_zero_for_touching_or_degenerate_boxes():
    boxes = np.array([[0, 0, 2, 2], [2, 0, 4, 2], [3, 0, 5, 2], [1, 1, 1, 1]], float)
    iou = pairwise_iou(boxes, np.array([[1, 0, 3, 2]], float))
    assert iou[:, 0].tolist() == pytest.approx([2 / 6, 2 / 6, 0.0, 0.0])
    assert np.isfinite(pairwise_iou(np.zeros((1, 4)), np.zeros((1, 4)))).all()


def test_max_det_keeps_only_best_scores_per_class_and_drops_the_rest():
    boxes = np.array([[0, 0, 10, 10]] * 3 + [[50, 50, 60, 60]] * 2, float)
    scores = [0.1, 0.9, 0.5, 0.3, 0.2]
    stats = match_image(boxes, scores, [0, 0, 0, 1, 1], np.zeros((0, 4)), [], max_det=2)
    assert sorted(stats.conf.tolist()) == pytest.approx(sorted([0.9, 0.5, 0.3, 0.2]))
    assert stats.pred_cls.tolist() == [0, 0, 1, 1]  # input order of the kept rows


def test_torch_tensors_give_the_same_stats_as_numpy():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    gt = _random_boxes(rng, 5)
    pred = np.concatenate([gt + rng.normal(0, 3, gt.shape), _random_boxes(rng, 4)])
    scores, cls, gcls = rng.random(9).astype(np.float32), rng.integers(0, 2, 9), rng.integers(0, 2, 5)
    a = match_image(pred, scores, cls, gt, gcls)
    b = match_image(*(torch.from_numpy(np.asarray(x)) for x in (pred, scores, cls, gt, gcls)))
    assert np.array_equal(a.tp, b.tp) and np.array_equal(a.conf, b.conf)


# ---------------------------------------------------------------- empty cases


def test_no_detections_give_zeros_not_nan():
    result = _compute(2, match_image(np.zeros((0, 4)), [], [], [[0, 0, 5, 5]], [1]))
    values = (result.map50, result.map50_95, result.precision, result.recall)
    assert values == (0.0, 0.0, 0.0, 0.0)
    assert result.per_class[1].n_gt == 1 and result.n_images == 1


def test_nothing_at_all_gives_zeros():
    result = DetectionMetrics(3).compute()
    assert (result.map50, result.map50_95, result.precision, result.recall, result.n_images) == (
        0,
        0,
        0,
        0,
        0,
    )
    assert result.per_class == {}
    bg = _compute(1, match_image(np.zeros((0, 4)), [], [], np.zeros((0, 4)), []))
    assert bg.map50 == 0.0 and bg.n_images == 1 and not np.isnan(bg.precision)


def test_class_without_ground_truth_is_left_out_of_the_means():
    perfect = _stats([1], [0.9], [0], [0])
    stray = _stats([0, 0], [0.95, 0.9], [1, 1], [])
    result = _compute(2, perfect, stray)
    assert (result.map50, result.map50_95) == pytest.approx((1.0, 1.0)) and set(result.per_class) == {0}
    assert result.n_pred == 3


def test_false_positives_on_background_images_lower_ap():
    hit = _stats([1], [0.5], [0], [0], image_id=0)
    clean = _compute(1, hit, _stats([], [], [], [], image_id=1))
    noisy = _compute(1, hit, _stats([0], [0.9], [0], [], image_id=1))
    assert clean.map50 == pytest.approx(1.0) and noisy.map50 == pytest.approx(0.5)
    assert noisy.n_images == 2


# ---------------------------------------------------------------- precision / recall


def test_precision_recall_are_taken_at_the_max_f1_confidence():
    # thresholds: 0.9 -> P 1, R .5 (F1 .667); 0.6 -> P .5, R .5; 0.3 -> P 2/3, R 1 (F1 .8)
    result = _compute(1, _stats([1, 0, 1], [0.9, 0.6, 0.3], [0, 0, 0], [0, 0]))
    assert result.conf_threshold == pytest.approx(0.3)
    assert result.precision == pytest.approx(2 / 3) and result.recall == 1.0
    assert result.per_class[0].precision == pytest.approx(2 / 3)


def test_chosen_confidence_maximizes_mean_f1_over_classes():
    rng = np.random.default_rng(11)
    stats = [
        _stats(rng.random(6) < 0.6, rng.random(6), rng.integers(0, 3, 6), rng.integers(0, 3, 4), i)
        for i in range(12)
    ]
    result = _compute(3, *stats)
    conf = np.concatenate([s.conf for s in stats])
    cls = np.concatenate([s.pred_cls for s in stats])
    tp = np.concatenate([s.tp[:, 0] for s in stats])
    n_gt = np.bincount(np.concatenate([s.gt_cls for s in stats]), minlength=3)

    def naive(tau):
        p, r = [], []
        for c in range(3):
            kept = (cls == c) & (conf >= tau)
            p.append(tp[kept].sum() / kept.sum() if kept.sum() else 0.0)
            r.append(tp[kept].sum() / n_gt[c])
        f1 = [2 * a * b / (a + b) if a + b else 0.0 for a, b in zip(p, r)]
        return np.mean(f1), np.mean(p), np.mean(r)

    best = max(naive(t)[0] for t in np.unique(conf))
    f1, p, r = naive(np.float32(result.conf_threshold))
    assert f1 == pytest.approx(best, abs=1e-12)
    assert (result.precision, result.recall) == pytest.approx((p, r), abs=1e-12)


# ---------------------------------------------------------------- distributed merge


def _random_boxes(rng, n):
    xy = rng.uniform(0, 200, (n, 2))
    return np.concatenate([xy, xy + rng.uniform(5, 60, (n, 2))], axis=1)


def _random_image(rng, image_id, nc=4):
    gt = _random_boxes(rng, int(rng.integers(0, 6)))
    gcls = rng.integers(0, nc - 1, len(gt))
    pred = np.concatenate([gt + rng.normal(0, 4, gt.shape), _random_boxes(rng, int(rng.integers(0, 4)))])
    pcls = np.concatenate([gcls, rng.integers(0, nc, len(pred) - len(gt))])
    scores = rng.integers(1, 6, len(pred)) / 5  # few distinct scores: many ties across images
    return match_image(pred, scores, pcls, gt, gcls, image_id=image_id)


@pytest.mark.parametrize("with_ids", [True, False])
def test_shuffled_split_over_ranks_merges_to_the_whole_result(with_ids):
    rng = np.random.default_rng(5)
    images = [_random_image(rng, i if with_ids else -1) for i in range(40)]
    whole = _compute(4, *images)
    assert whole.n_pred > 40 and 0 < whole.map50 < 1

    for trial in range(3):
        order = rng.permutation(len(images))
        cuts = np.sort(rng.choice(np.arange(1, len(images)), 2, replace=False))
        shards = [[images[i] for i in part] for part in np.split(order, cuts)]
        shards = pickle.loads(pickle.dumps(shards))  # as torch.distributed.gather_object delivers them
        total = DetectionMetrics(4, [f"c{i}" for i in range(4)])
        ranks = []
        for shard in shards:
            rank = DetectionMetrics(4)
            rank.update(shard)
            ranks.append(rank)
        total.merge(ranks[2], ranks[0].image_stats, iter(ranks[1].image_stats))
        assert total.compute() == whole, f"trial {trial}"


def test_sampler_padding_duplicates_are_counted_once():
    rng = np.random.default_rng(8)
    images = [_random_image(rng, i) for i in range(10)]
    whole = _compute(4, *images)
    world = 4  # 10 images over 4 ranks: a distributed sampler pads with images 0 and 1
    padded = images + images[:2]
    shards = [padded[r::world] for r in range(world)]
    total = DetectionMetrics(4, [f"c{i}" for i in range(4)])
    total.merge(*shards)
    assert len(total) == 12
    assert total.compute() == whole


def test_repeated_id_with_other_scores_counts_one_image_and_logs(caplog):
    rng = np.random.default_rng(9)
    first = _random_image(rng, 0)
    again = ImageStats(first.tp, first.conf * 0.99, first.pred_cls, first.gt_cls, 0)
    with caplog.at_level(logging.INFO, logger="libreyolo_models.tasks.detect.metrics"):
        result = _compute(4, first, again)
    assert result.n_images == 1 and result.n_gt == len(first.gt_cls)
    assert "repeated image ids" in caplog.text


def test_same_id_with_different_ground_truth_is_an_error_naming_the_fix():
    a = _stats([1], [0.9], [0], [0], image_id=3)
    b = _stats([1], [0.9], [0], [0, 0], image_id=3)
    with pytest.raises(ValueError, match=r"image_id 3 appears twice.*index in the whole split"):
        _compute(1, a, b)


def test_compute_is_repeatable_and_reset_forgets():
    metrics = DetectionMetrics(1)
    metrics.update(_stats([1, 0], [0.9, 0.8], [0, 0], [0]))
    assert metrics.compute() == metrics.compute()
    metrics.reset()
    assert len(metrics) == 0 and metrics.compute().n_images == 0


def test_image_stats_pickle_round_trip_keeps_dtypes_and_values():
    stats = match_image([[0, 0, 10, 10]], [0.75], [2], [[0, 0, 10, 10]], [2], image_id=7)
    back = pickle.loads(pickle.dumps(stats))
    assert (back.tp.dtype, back.conf.dtype, back.pred_cls.dtype, back.gt_cls.dtype) == (
        np.bool_,
        np.float32,
        np.int64,
        np.int64,
    )
    assert back.image_id == 7 and back.digest() == stats.digest()
    assert len(pickle.dumps(stats)) < 1200  # small: no boxes travel between ranks


# ---------------------------------------------------------------- reporting


def test_as_dict_has_the_four_logged_keys():
    result = _compute(1, _stats([1, 0, 1], [0.9, 0.8, 0.7], [0, 0, 0], [0, 0]))
    d = result.as_dict()
    assert d == {
        "metrics/precision": result.precision,
        "metrics/recall": result.recall,
        "metrics/mAP50": result.map50,
        "metrics/mAP50-95": result.map50_95,
    }


def test_table_lists_all_row_then_named_classes_with_counts():
    a = _stats([1, 0], [0.9, 0.8], [0, 1], [0, 0], image_id=0)
    b = _stats([1], [0.9], [1], [1], image_id=1)
    result = DetectionMetrics(3, {0: "circle", 1: "square", 2: "star"})
    result.update([a, b])
    lines = result.compute().table().splitlines()
    assert lines[0].split() == ["Class", "Images", "Instances", "P", "R", "mAP50", "mAP50-95"]
    assert lines[1].split()[:3] == ["all", "2", "3"]
    assert lines[2].split()[:3] == ["circle", "1", "2"] and lines[3].split()[:3] == ["square", "1", "1"]
    assert len(lines) == 4  # "star" has no ground truth: not a row


# ---------------------------------------------------------------- errors


def test_out_of_range_class_names_value_and_nc():
    with pytest.raises(ValueError, match=r"predicted class 5, outside 0..2 \(nc=3\)"):
        DetectionMetrics(3).update(_stats([0], [0.5], [5], []))
    with pytest.raises(ValueError, match=r"ground-truth class -1"):
        DetectionMetrics(3).update(_stats([], [], [], [-1]))


def test_threshold_count_mismatch_is_an_error():
    stats = match_image([[0, 0, 1, 1]], [0.5], [0], [[0, 0, 1, 1]], [0], iou_thresholds=[0.5, 0.75])
    with pytest.raises(ValueError, match=r"2 IoU thresholds but DetectionMetrics expects 10"):
        DetectionMetrics(1).update(stats)
    custom = DetectionMetrics(1, iou_thresholds=[0.5, 0.75])
    custom.update(stats)
    assert custom.compute().map50_95 == pytest.approx(1.0)


def test_bad_inputs_are_rejected_with_the_offending_shape():
    with pytest.raises(ValueError, match=r"pred_boxes has shape \(2, 5\)"):
        match_image(np.zeros((2, 5)), [0, 0], [0, 0], np.zeros((0, 4)), [])
    with pytest.raises(ValueError, match=r"pred_boxes has 2 rows, pred_scores 1"):
        match_image(np.zeros((2, 4)), [0], [0, 0], np.zeros((0, 4)), [])
    with pytest.raises(ValueError, match=r"gt_boxes has 1 rows but gt_cls 2"):
        match_image(np.zeros((0, 4)), [], [], np.zeros((1, 4)), [0, 1])
    with pytest.raises(ValueError, match=r"iou_thresholds=\[0.0\]"):
        match_image(np.zeros((0, 4)), [], [], np.zeros((0, 4)), [], iou_thresholds=[0.0])
    with pytest.raises(ValueError, match=r"detection score nan"):
        ImageStats(np.zeros((1, T), bool), [np.nan], [0], [])
    with pytest.raises(ValueError, match=r"lack 0.50"):
        DetectionMetrics(1, iou_thresholds=[0.75])
    with pytest.raises(ValueError, match=r"nc=0"):
        DetectionMetrics(0)
    with pytest.raises(TypeError, match=r"got dict; expected ImageStats"):
        DetectionMetrics(1).update([{"tp": []}])


def test_input_errors_are_library_errors_and_value_errors():
    with pytest.raises(LibreYOLOError) as info:
        DetectionMetrics(2).update(_stats([0], [0.5], [2], []))
    assert isinstance(info.value, ValueError)
