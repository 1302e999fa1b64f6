"""Segment and pose validation artefacts: ``predictions.json`` in COCO's results format (masks as
RLE over the original picture, keypoints in its pixels) mapped back through the letterbox, read by
pycocotools and scoring an oracle perfectly against the dataset's own COCO ground truth; and the
boxes' confusion matrices with ``plots=True``."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from libreyolo_models import LibreYOLO
from libreyolo_models.contract.instances import InstancePrediction
from libreyolo_models.errors import ConfigError
from libreyolo_models.tasks import get_task
from libreyolo_models.tasks.instances import validator
from libreyolo_models.tasks.instances.artefacts import masks_to_picture, to_original
from libreyolo_models.tasks.instances.geometry import InstanceSample
from libreyolo_models.tasks.segment.shapes_inst import generate_shapes_inst

pytest.importorskip("pycocotools")
from pycocotools.coco import COCO  # noqa: E402
from pycocotools.cocoeval import COCOeval  # noqa: E402


def _sample(**fields: Any) -> InstanceSample:
    base = {"image": torch.zeros(3, 64, 64, dtype=torch.uint8), "classes": torch.zeros(0, dtype=torch.int64),
            "boxes": torch.zeros((0, 4), dtype=torch.float64), "masks": None, "keypoints": None, "path": "7.jpg",
            "ori_size": (30, 60), "region": (0, 16, 64, 48), "index": 0}
    return InstanceSample(**{**base, **fields})


def test_predictions_map_back_through_the_letterbox() -> None:
    sample = _sample()  # a 60 x 30 picture letterboxed into 64: rows 16..48 hold it
    assert to_original(torch.tensor([[0.0, 16.0], [64.0, 48.0], [32.0, 32.0]]), sample).tolist() == [
        [0.0, 0.0], [60.0, 30.0], [30.0, 15.0]]
    logits = torch.full((1, 64, 64), -5.0)
    logits[0, 16:32, 0:32] = 5.0  # the picture's top-left quarter
    mask = masks_to_picture(logits, sample, 64)[0]
    assert mask.shape == (30, 60) and mask[:15, :30].all() and not mask[15:].any() and not mask[:, 30:].any()


@pytest.fixture(scope="module")
def inst_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("shapes-inst")
    generate_shapes_inst(root, split_sizes={"train": 1, "val": 6})
    return root / "data.yaml"


def oracle(monkeypatch: pytest.MonkeyPatch, model: LibreYOLO) -> None:
    """The model predicts each validation picture's ground truth (boxes, masks as sharp logits)."""
    seen: list[Any] = []

    def recording(iterable: Any, **_: Any) -> Iterator[Any]:
        for batch in iterable:
            seen.append(batch)
            yield batch

    def postprocess(outputs: Any, options: Any) -> list[InstancePrediction]:
        out = []
        for sample in seen[-1].targets:
            det = torch.cat([sample.boxes.float(), torch.full((len(sample.boxes), 1), 0.9),
                             sample.classes.float()[:, None]], dim=1)
            out.append(InstancePrediction(det, masks=(sample.masks.float() * 2 - 1) * 8))
        return out

    monkeypatch.setattr(validator, "tqdm", recording)
    monkeypatch.setattr(model.family, "postprocess", postprocess)


def test_segment_predictions_json_scores_an_oracle_perfectly_in_pycocotools(
        inst_set: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = LibreYOLO("LibreECs-seg.yaml", nc=5)
    oracle(monkeypatch, model)
    ours = model.val(data=str(inst_set), imgsz=64, batch=4, save_json=True, plots=True, project=str(tmp_path),
                     name="v", verbose=False)
    assert ours.as_dict()["metrics/mAP50(M)"] == pytest.approx(1.0)
    folder = tmp_path / "v"
    assert (folder / "confusion_matrix.png").is_file() and (folder / "confusion_matrix_normalized.png").is_file()
    assert sorted(p.name for p in folder.glob("val_batch*")) == [f"val_batch{i}_{k}.jpg" for i in (0, 1)
                                                                for k in ("labels", "pred")]  # 6 images, batch 4
    assert {f"{k}{c}_curve.png" for k in ("Box", "Mask") for c in ("PR", "P", "R", "F1")} <= {
        p.name for p in folder.iterdir()}
    rows = json.loads((folder / "predictions.json").read_text())
    assert {"image_id", "category_id", "bbox", "score", "segmentation"} <= set(rows[0])
    gt = COCO(str(inst_set.parent / "annotations" / "val.json"))
    by_stem = {Path(image["file_name"]).stem: image["id"] for image in gt.dataset["images"]}
    for row in rows:  # our image id is the file's stem; this set numbers its pictures
        row["image_id"] = by_stem[str(row["image_id"])]
        row["category_id"] = gt.getCatIds()[row["category_id"]]
    stats = {}
    for kind in ("bbox", "segm"):
        with contextlib.redirect_stdout(io.StringIO()):
            evaluator = COCOeval(gt, gt.loadRes(rows), kind)
            evaluator.evaluate()
            evaluator.accumulate()
            evaluator.summarize()
        stats[kind] = evaluator.stats
    # at the original size, back through a 64 px letterbox: every object found, outlines within a few pixels
    assert stats["segm"][1] >= 0.99 and stats["segm"][0] >= 0.6, stats
    assert stats["bbox"][1] >= 0.99 and stats["bbox"][0] >= 0.7, stats


def test_pose_predictions_json_carries_keypoints_in_picture_pixels(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"has 5 keypoints per object but the model predicts 17"):
        LibreYOLO("LibreECs-pose.yaml").val(data="shapes-pose", imgsz=64)  # COCO's 17 by default
    model = LibreYOLO("LibreECs-pose.yaml", nc=len(get_task("pose").load_data("shapes-pose").names), keypoints=5)
    assert model.keypoints == 5 and LibreYOLO("LibreECs-seg.yaml").keypoints is None
    for options, message in [({"model": "LibreECs-seg.yaml", "keypoints": 5}, "sets a pose model's keypoints"),
                             ({"model": "LibreECs-pose.yaml", "keypoints": 0}, "at least 1")]:
        with pytest.raises(ConfigError, match=message):
            LibreYOLO(**options)
    with torch.no_grad():
        for name, param in model.net.named_parameters():
            if name.endswith("bias"):
                param.normal_(0.0, 0.5)
    model.val(data="shapes-pose", imgsz=64, batch=8, conf=0.001, save_json=True, plots=True, project=str(tmp_path),
              name="p", verbose=False)
    assert (tmp_path / "p" / "val_batch0_labels.jpg").is_file() and (tmp_path / "p" / "val_batch2_pred.jpg").is_file()
    assert (tmp_path / "p" / "PosePR_curve.png").is_file() and (tmp_path / "p" / "BoxF1_curve.png").is_file()
    rows = json.loads((tmp_path / "p" / "predictions.json").read_text())
    assert rows and all(len(row["keypoints"]) == 3 * 5 for row in rows)
    xy = np.asarray([row["keypoints"] for row in rows]).reshape(len(rows), -1, 3)
    assert np.isfinite(xy).all() and (xy[..., 2] >= 0).all() and (xy[..., 2] <= 1).all()
