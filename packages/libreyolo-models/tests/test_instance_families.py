"""EC, RF-DETR and YOLO-NAS-Pose through the segment and pose tasks: choosing the task, checkpoints (task and
keypoint count), the seams and post-processing, the losses reaching every parameter and falling,
validation losses, predict's ``Results``."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from libreyolo_models import SAMPLE_IMAGE, LibreYOLO
from libreyolo_models.contract.family import LossContext
from libreyolo_models.contract.instances import InstancePrediction, InstanceTargets
from libreyolo_models.errors import CheckpointError, ConfigError
from libreyolo_models.tasks import EvalSettings
from libreyolo_models.train.val_loss import validation_loss

# (architecture, task, imgsz): the smallest of each family at a small size its layout accepts
CASES = [("LibreECs.yaml", "segment", 64), ("LibreECs.yaml", "pose", 64), ("LibreRFDETRn.yaml", "segment", 48),
         ("LibreRFDETRn.yaml", "pose", 64), ("LibreYOLONASn.yaml", "pose", 64)]
IDS = ["ec-segment", "ec-pose", "rfdetr-segment", "rfdetr-pose", "yolonas-pose"]


def build(arch: str, task: str, imgsz: int, keypoints: int | None = None) -> LibreYOLO:
    torch.manual_seed(0)
    model = LibreYOLO(arch, task=task, nc=1 if task == "pose" else 3, imgsz=imgsz)
    if keypoints is not None:
        model._replace(model._model.rebuilt(keypoints=keypoints), "keypoints for the test")
    family = model.family
    if hasattr(family, "num_denoising"):
        family.num_denoising, family.pose_denoising = 10, 5
    if hasattr(model.net, "set_training_queries"):
        model.net.set_training_queries(queries=20, groups=2)
    return model


def _targets(task: str, keypoints: int) -> InstanceTargets:
    boxes = torch.tensor([[0, 0, 0.5, 0.5, 0.4, 0.3], [1, 0, 0.3, 0.6, 0.3, 0.5], [1, 0, 0.7, 0.3, 0.2, 0.2]])
    if task == "segment":
        masks = torch.zeros(3, 16, 16, dtype=torch.uint8)
        masks[0, 6:10, 5:11] = 1
        masks[1, 6:14, 3:7] = 1
        masks[2, 3:6, 10:13] = 1
        boxes[:, 1] = torch.tensor([0.0, 2.0, 1.0])
        return InstanceTargets(boxes, masks=masks)
    xy = boxes[:, None, 2:4] + (torch.rand(3, keypoints, 2, generator=torch.Generator().manual_seed(1)) - 0.5) * 0.2
    kp = torch.cat((xy, torch.full((3, keypoints, 1), 2.0)), -1)
    kp[0, -1, 2] = 0  # one keypoint not labelled
    return InstanceTargets(boxes, keypoints=kp, sigmas=torch.full((keypoints,), 0.1))


def test_the_task_is_chosen_by_argument_name_or_checkpoint(tmp_path: Path) -> None:
    pose = LibreYOLO("LibreECs.yaml", task="pose", imgsz=64)
    assert pose.task == "pose" and pose.nc == 1 and pose._model.keypoints == 17
    assert LibreYOLO("LibreECs-seg.yaml", imgsz=64).task == "segment"
    assert LibreYOLO("LibreECs.yaml", imgsz=64).task == "detect"
    with pytest.raises(ConfigError, match="task"):
        LibreYOLO("LibreECs-seg.yaml", task="pose")
    with pytest.raises(ConfigError, match="one class"):
        LibreYOLO("LibreECs.yaml", task="pose", nc=3)
    pose.save(tmp_path / "pose.pt")
    assert LibreYOLO(str(tmp_path / "pose.pt")).task == "pose"
    with pytest.raises(CheckpointError, match="task"):
        LibreYOLO(str(tmp_path / "pose.pt"), task="segment")


def test_rfdetr_segment_takes_image_sides_in_multiples_of_24() -> None:
    model = LibreYOLO("LibreRFDETRn.yaml", task="segment", imgsz=48)
    assert model._model.stride == 24 and model.spec.task("segment").default_imgsz == 312
    with pytest.raises(ConfigError, match="multiple of 24"):
        model._model.resolve_imgsz(64)
    with pytest.raises(ConfigError, match="multiple of 24"):
        LibreYOLO("LibreRFDETRn.yaml", task="segment", imgsz=64)


@pytest.mark.parametrize("arch", ["LibreECs.yaml", "LibreRFDETRn.yaml", "LibreYOLONASn.yaml"])
def test_keypoint_count_survives_checkpoints_and_is_read_from_bare_weights(arch: str, tmp_path: Path) -> None:
    model = build(arch, "pose", 64, keypoints=5)
    assert model._model.keypoints == 5
    model.save(tmp_path / "kp.pt")
    loaded = LibreYOLO(str(tmp_path / "kp.pt"))
    assert loaded._model.keypoints == 5 and loaded.task == "pose"
    impl = model.spec.family_class()
    assert impl.infer_keypoints(model.net.state_dict(), "pose") == 5
    assert impl.infer_nc(model.net.state_dict(), "pose") == 1


@pytest.mark.parametrize(("arch", "task", "imgsz"), CASES, ids=IDS)
def test_seams_and_postprocess_give_masks_or_keypoints_per_detection(arch: str, task: str, imgsz: int) -> None:
    model = build(arch, task, imgsz)
    images = torch.rand(2, 3, imgsz, imgsz)
    with torch.no_grad():
        det, extra = model._model.inference_forward(images, net=model.net.eval())
    q = det.shape[1]
    assert det.shape[0] == 2 and det.shape[2] == 4 + model.nc
    if task == "segment":
        assert extra.shape == (2, q, imgsz // 4, imgsz // 4)
    else:
        assert extra.shape == (2, q, 17, 3) and ((extra[..., 2] >= 0) & (extra[..., 2] <= 1)).all()
    options = model.task_spec.postprocess_options({"conf": 0.0, "max_det": 4})
    preds = model.family.postprocess((det, extra), options)
    assert len(preds) == 2 and all(isinstance(p, InstancePrediction) and len(p) == 4 for p in preds)
    first = preds[0]
    chosen = extra[0][:] if task == "segment" else extra[0]
    body = first.masks if task == "segment" else first.keypoints
    assert body is not None and body.shape[0] == 4
    assert any(torch.equal(body[0].float(), row.float()) for row in chosen)


@pytest.mark.parametrize(("arch", "task", "imgsz"), CASES, ids=IDS)
def test_the_loss_reaches_every_trainable_parameter(arch: str, task: str, imgsz: int) -> None:
    model = build(arch, task, imgsz, keypoints=5 if task == "pose" else None)
    net, family = model.net.train(), model.family
    targets = _targets(task, 5)
    head = model._model.training_forward(torch.rand(2, 3, imgsz, imgsz))
    if hasattr(family, "training_head") and "EC" in type(family).__name__:
        head = family.training_head(net, head, targets)
    result = family.compute_loss(head, targets, LossContext(gains={}))
    result.total.backward()
    assert result.items.shape == (len(model.spec.task(task).loss_names),) and torch.isfinite(result.total)
    missing = [n for n, p in net.named_parameters() if p.requires_grad and p.grad is None]
    unused = [n for n in missing if not n.startswith(("refpoint_embed", "query_feat", "transformer.enc_out"))]
    assert not unused, unused[:5]


@pytest.mark.slow
@pytest.mark.parametrize(("arch", "task", "imgsz"), CASES[:4], ids=IDS[:4])  # YOLO-NAS-Pose: test_yolonas_pose_task
def test_loss_falls_over_15_steps_on_a_fixed_batch(arch: str, task: str, imgsz: int) -> None:
    model = build(arch, task, imgsz, keypoints=5 if task == "pose" else None)
    net, family = model.net.train(), model.family
    targets = _targets(task, 5)
    images = torch.rand(2, 3, imgsz, imgsz, generator=torch.Generator().manual_seed(2))
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3)
    losses = []
    torch.manual_seed(0)
    for _ in range(15):
        head = family.training_forward(net, images)
        if "EC" in type(family).__name__:
            head = family.training_head(net, head, targets)
        result = family.compute_loss(head, targets, LossContext(gains={}))
        optimizer.zero_grad()
        result.total.backward()
        optimizer.step()
        losses.append(result.total.item())
    assert sum(losses[-3:]) / 3 < 0.8 * sum(losses[:3]) / 3, losses


@pytest.mark.parametrize(("arch", "task", "imgsz"), [CASES[0], CASES[3]], ids=["ec-segment", "rfdetr-pose"])
def test_predict_on_the_sample_image_fills_masks_or_keypoints(arch: str, task: str, imgsz: int) -> None:
    model = build(arch, task, imgsz)
    res = model.predict(str(SAMPLE_IMAGE), conf=0.0, max_det=3, device="cpu")[0]
    h, w = res.orig_shape
    assert len(res.boxes) == 3
    if task == "segment":
        assert res.masks.data.shape == (3, h, w) and res.masks.data.dtype == torch.bool and res.keypoints is None
    else:
        assert res.keypoints.data.shape == (3, 17, 3) and res.masks is None
    assert res.plot().shape == (h, w, 3)


@pytest.mark.parametrize(("arch", "task", "imgsz"), CASES, ids=IDS)
def test_training_validation_averages_the_family_loss_over_the_val_batches(arch: str, task: str, imgsz: int,
                                                                           tmp_path: Path) -> None:
    """``val/<term>_loss``: validation batches' ground truth becomes training's targets, and the
    eval-mode network gives what the loss reads (RF-DETR segment: the mask factors)."""
    from libreyolo_models.tasks.pose.shapes_pose import ensure_shapes_pose
    from libreyolo_models.tasks.segment.shapes_inst import ensure_shapes_inst

    ensure = ensure_shapes_inst if task == "segment" else ensure_shapes_pose
    data = ensure(tmp_path, split_sizes={"train": 1, "val": 3})
    model = LibreYOLO(arch, task=task, nc=1 if task == "pose" else 5, imgsz=imgsz)
    if task == "pose":
        model._replace(model._model.rebuilt(keypoints=5), "the houses' five corners")
    handle = model._model
    config = handle.task_spec.load_data(str(data))
    pipeline = handle.task_spec.val_pipeline(handle.task_spec.load_split(config, "val"), imgsz=imgsz, batch_size=2,
                                             device=torch.device("cpu"), workers=0, cache=False)
    names = model.spec.task(task).loss_names
    loss = validation_loss(handle, handle.net.eval(), LossContext(gains={}))
    result = handle.task_spec.evaluate(handle, handle.inference_forward, pipeline, progress=False,
                                       settings=EvalSettings(loss=loss, loss_names=names))
    losses = {k: v for k, v in result.as_dict().items() if k.startswith("val/")}
    assert sorted(losses) == sorted(f"val/{name}_loss" for name in names)   # a failing loss leaves them out
    assert all(math.isfinite(v) and v >= 0 for v in losses.values()), losses
