"""``Results.masks`` (instance) and ``Results.keypoints``: summary, plot, save, JSON/CSV, device and
NumPy copies, ``save_txt`` rows, the mapping back to the original image, and tracking keeping ids."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from libreyolo_models.contract.instances import InstancePrediction
from libreyolo_models.data.letterbox_images import letterbox_geometry
from libreyolo_models.predict.outputs import yolo_label_lines
from libreyolo_models.tasks import get_task
from libreyolo_models.tasks.detect.boxes import Boxes
from libreyolo_models.tasks.pose.keypoints import Keypoints
from libreyolo_models.tasks.results import Results
from libreyolo_models.tasks.segment.masks import InstanceMasks, masks_to_original
from libreyolo_models.track.registry import get_tracker
from libreyolo_models.track.session import TrackSession

NAMES = {0: "a", 1: "b"}
IMAGE = np.full((40, 60, 3), 100, np.uint8)


def _segment_result() -> Results:
    masks = torch.zeros(2, 40, 60, dtype=torch.bool)
    masks[0, 5:15, 10:30] = True
    masks[1, 20:35, 40:55] = True
    boxes = Boxes(torch.tensor([[10.0, 5, 30, 15, 0.9, 0], [40, 20, 55, 35, 0.8, 1]]), (40, 60))
    return Results(IMAGE, "img.jpg", NAMES, boxes=boxes, masks=InstanceMasks(masks, np.array([0, 1])))


def _pose_result(shift: float = 0.0) -> Results:
    kp = torch.tensor([[[12.0 + shift, 6, 0.9], [28 + shift, 14, 0.2]], [[41 + shift, 21, 0.8], [54 + shift, 34, 0.7]]])
    boxes = Boxes(torch.tensor([[10.0 + shift, 5, 30 + shift, 15, 0.9, 0], [40 + shift, 20, 55 + shift, 35, 0.8, 0]]),
                  (40, 60))
    return Results(IMAGE, "img.jpg", NAMES, boxes=boxes, contents={"keypoints": Keypoints(kp, (40, 60))})


def test_instance_masks_draw_under_the_boxes_and_convert(tmp_path: Path) -> None:
    res = _segment_result()
    assert res.summary() == "1 a, 1 b" and len(res) == 2 and res.keypoints is None
    drawn = res.plot(labels=False)
    assert (drawn[10, 20] != IMAGE[10, 20]).any() and (drawn[38, 2] == IMAGE[38, 2]).all()
    rows = json.loads(res.to_json())
    assert rows[0]["name"] == "a" and len(rows[0]["polygon"]) == 4  # a rectangle's four corners
    assert res.to_csv().splitlines()[0] == "name,class,confidence,x1,y1,x2,y2"
    assert isinstance(res.numpy().masks.data, np.ndarray) and res.cpu().masks.data.dtype == torch.bool
    assert res.numpy().masks.xy[1].tolist() == res.masks.xy[1].tolist()
    assert res.save(tmp_path / "out.png").is_file()
    lines = yolo_label_lines(res, save_conf=True)
    assert lines[0].split()[0] == "0" and len(lines[0].split()) == 1 + 2 * 4 + 1
    xs = [float(v) for v in lines[0].split()[1:-1:2]]
    assert min(xs) == pytest.approx(10 / 60, abs=1e-6) and max(xs) == pytest.approx(30 / 60, abs=1e-6)


def test_keypoints_content_draws_skeletons_and_writes_pose_rows(tmp_path: Path) -> None:
    res = _pose_result()
    kp = res.keypoints
    assert kp is not None and res.masks is None and kp.xy.shape == (2, 2, 2) and kp.conf.shape == (2, 2)
    assert kp.xyn[0, 0].tolist() == pytest.approx([12 / 60, 6 / 40])
    drawn = res.plot(labels=False, conf=False)
    assert (drawn[6, 12] != IMAGE[6, 12]).any()
    rows = json.loads(res.to_json())
    assert rows[1]["keypoints"][0] == [41.0, 21.0, 0.8]
    assert "keypoints" in res.to_csv().splitlines()[0]
    assert isinstance(res.numpy().keypoints.data, np.ndarray) and res.to("cpu").keypoints.data.shape == (2, 2, 3)
    line = yolo_label_lines(res)[0].split()
    assert len(line) == 5 + 2 * 3 and float(line[5]) == 12 / 60 and float(line[7]) == 0.9
    assert res.save(tmp_path / "pose.png").is_file()


def test_masks_map_back_through_the_letterbox() -> None:
    """A 40 x 60 image letterboxed to 64 (rows 10-53 of the input): its mask logits at 16 x 16 come
    back at the right place."""
    _, _, info = letterbox_geometry(40, 60, 64)
    logits = torch.full((1, 16, 16), -5.0)
    logits[0, 2:14, 0:8] = 5.0  # the input's rows 8-56 (the whole image) and its left half
    out = masks_to_original(logits, info, 64)
    assert out.shape == (1, 40, 60)
    assert out[0, :, :28].float().mean() > 0.95 and not out[0, :, 32:].any()


def test_segment_results_come_from_predictions_at_the_original_size() -> None:
    task = get_task("segment")
    _, _, info = letterbox_geometry(40, 60, 64)
    masks = torch.full((1, 16, 16), -5.0)
    masks[0, 6:10, 6:10] = 5.0
    pred = InstancePrediction(torch.tensor([[24.0, 24, 40, 40, 0.9, 1]]), masks=masks)
    res = task.make_results(IMAGE, "x", NAMES, pred, info, {})
    assert res.boxes.data.shape == (1, 6) and res.masks.data.shape == (1, 40, 60)
    ys, xs = res.masks.data[0].nonzero(as_tuple=True)
    assert 20 <= xs.float().mean() <= 40 and 10 <= ys.float().mean() <= 30


@pytest.mark.parametrize("tracker", ["bytetrack", "botsort", "ocsort"])
def test_tracking_keeps_ids_and_their_keypoints_together(tracker: str) -> None:
    spec = get_tracker(tracker)
    session = TrackSession(spec, spec.config())
    first = session(_pose_result())
    second = session(_pose_result(shift=1.0))
    assert first.boxes.id.tolist() == second.boxes.id.tolist() == [1, 2]
    kp = second.keypoints
    assert kp is not None and len(kp) == 2
    assert kp.data[0, 0, 0].item() == 13.0  # the keypoints of track 1 stay with track 1's box
    masks = session(_segment_result())
    assert len(masks.masks) == len(masks.boxes)
