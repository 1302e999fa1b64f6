"""``val`` of the ``prompt-segment`` task (the SAM paper's box-prompt evaluation): IoU and its
aggregation by hand, ground truth at the picture's size, val's masks equal predict's for the same
boxes, the command line, and training still refused. A tiny SAM (64 px) on a 3-image shapes-inst."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from libreyolo_models import LibreYOLO
from libreyolo_models.errors import ConfigError
from libreyolo_models.families.sam import nn as sam_nn
from libreyolo_models.families.sam.nn import SamArch
from libreyolo_models.tasks import get_task
from libreyolo_models.tasks.prompt_segment import box_validation
from libreyolo_models.tasks.prompt_segment.box_metrics import BoxPromptMetrics, paired_iou
from libreyolo_models.tasks.prompt_segment.box_validation import BoxPromptPipeline
from libreyolo_models.tasks.segment.shapes_inst import ensure_shapes_inst

TINY = SamArch(32, 2, 2, (1,), grid=4, window=2)


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> LibreYOLO:
    monkeypatch.setitem(sam_nn.ARCHS, "b", TINY)
    torch.manual_seed(0)
    return LibreYOLO(family="sam", size="b")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_shapes_inst(tmp_path_factory.mktemp("shapes"), split_sizes={"train": 1, "val": 3})


def test_paired_iou_of_known_masks() -> None:
    a = torch.zeros((3, 4, 4), dtype=torch.bool)
    b = torch.zeros((3, 4, 4), dtype=torch.bool)
    a[0, :2, :2] = True                 # 4 pixels
    b[0, :2, :] = True                  # 8 pixels, 4 shared: 4 / 8
    a[1, 0, 0] = b[1, 0, 0] = True      # identical: 1
    # pair 2: both empty -> 0, as pycocotools
    assert paired_iou(a, b).tolist() == [0.5, 1.0, 0.0]


def test_miou_averages_objects_and_classes_apart() -> None:
    metrics = BoxPromptMetrics({0: "a", 1: "b", 2: "c"})
    metrics.update(torch.tensor([1.0, 0.5, 0.7]), torch.tensor([0, 0, 1]))
    metrics.update(torch.tensor([0.2]), torch.tensor([0]))
    metrics.update(torch.zeros(0), torch.zeros(0, dtype=torch.long))  # an image without objects
    result = metrics.result()
    assert result.n_images == 3 and result.n_objects == 4
    assert result.miou == pytest.approx((1.0 + 0.5 + 0.7 + 0.2) / 4)  # over objects, not over classes
    assert result.iou50 == pytest.approx(3 / 4) and result.iou75 == pytest.approx(1 / 4)
    assert result.class_miou() == pytest.approx({"a": (1.0 + 0.5 + 0.2) / 3, "b": 0.7})  # "c": no objects, no row
    assert result.per_class[0][0] == 3 and result.per_class[1][2:] == (1.0, 0.0)
    assert result.fitness == result.miou and result.best_fields() == {"mIoU": result.miou}
    assert set(result.as_dict()) == {"metrics/mIoU", "metrics/IoU50", "metrics/IoU75"}
    assert "triangle" not in result.table() and "b" in result.table()


def test_prompts_are_gt_boxes_in_picture_pixels(data: Path) -> None:
    task = get_task("prompt-segment")
    split = task.load_split(task.load_data(data), "val")
    batches = list(BoxPromptPipeline(split, imgsz=64, batch_size=2, device=torch.device("cpu")))
    assert [len(b.targets) for b in batches] == [2, 1] and batches[0].images.shape == (2, 3, 64, 64)
    for target in (t for b in batches for t in b.targets):
        h, w = target.image.orig_shape
        for box, mask in zip(target.boxes, target.masks):
            ys, xs = np.nonzero(mask.rasterize(h, w))  # the exact mask at the picture's size
            tight = torch.tensor([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], dtype=torch.float32)
            assert torch.allclose(box, tight, atol=1.0)


def test_oracle_masks_score_one(model: LibreYOLO, data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def oracle(model: object, net: object, embedding: torch.Tensor, target: box_validation.BoxTargets) -> torch.Tensor:
        h, w = target.image.orig_shape
        return torch.from_numpy(np.stack([m.rasterize(h, w) for m in target.masks]))

    monkeypatch.setattr(box_validation, "decode_boxes", oracle)
    result = model.val(data=str(data), imgsz=64, batch=2, verbose=False)
    assert result.miou == 1.0 and result.iou75 == 1.0 and result.n_images == 3


def test_val_masks_are_predicts_masks(model: LibreYOLO, data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, torch.Tensor, torch.Tensor]] = []
    decode = box_validation.decode_boxes

    def recording(model: object, net: torch.nn.Module, embedding: torch.Tensor,
                  target: box_validation.BoxTargets) -> torch.Tensor:
        masks = decode(model, net, embedding, target)  # type: ignore[arg-type]
        seen.append((target.path, target.boxes, masks))
        return masks

    monkeypatch.setattr(box_validation, "decode_boxes", recording)
    result = model.val(data=str(data), imgsz=64, batch=2, verbose=False)
    assert result.n_objects == sum(len(b) for _, b, _ in seen) > 0
    assert 0.0 <= result.miou <= 1.0 and set(result.class_miou()) <= set(result.names.values())
    path, boxes, masks = seen[0]
    predicted = model(path, imgsz=64, boxes=boxes.tolist(), multimask_output=False)[0].masks
    assert predicted.data.shape == (len(boxes), 1, *masks.shape[-2:])
    assert torch.equal(torch.as_tensor(predicted.data)[:, 0], masks)


def test_cli_val_and_training_refused(model: LibreYOLO, data: Path, tmp_path: Path) -> None:
    from libreyolo_cli.main import main

    weights = model.save(tmp_path / "LibreSAMb.pt")
    assert main(["val", f"model={weights}", f"data={data}", "imgsz=64", "batch=2"]) == 0
    with pytest.raises(ConfigError, match="pretrained-only"):
        model.train(data=str(data), epochs=1)
    assert main(["train", f"model={weights}", f"data={data}", "epochs=1", "imgsz=64"]) != 0
