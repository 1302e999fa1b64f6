"""Training options users expect from Ultralytics: ``freeze``, ``single_cls``, ``rect``,
``fraction``, and ``model.add_callback``; each checked on its own unit, then all of them in one
short training run (and ``val(rect=True)``) on a small set of wide and tall pictures."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from libreyolo_models import LibreYOLO
from libreyolo_models.data.image_cache import open_image_cache
from libreyolo_models.errors import ConfigError
from libreyolo_models.tasks import get_task
from libreyolo_models.tasks.detect.datasets import load_split
from libreyolo_models.tasks.detect.rect import RectSamples, collate_rect, rect_order
from libreyolo_models.train.callbacks import EpochEnd, TrainStart
from libreyolo_models.train.fit_options import OptionedTask, freeze_layers, layer_names, take_fraction
from libreyolo_models.train.settings import TrainConfig

COLOURS = ((230, 40, 40), (40, 200, 40), (40, 40, 230))
SIZES = ((64, 128), (128, 64), (96, 128), (128, 96), (64, 96), (96, 64))   # (h, w): wide and tall


@pytest.fixture(scope="module")
def mixed_shapes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """24 training and 8 validation pictures of six aspect ratios, each with one or two coloured
    rectangles of three classes (YOLO labels); the data.yaml path."""
    root = tmp_path_factory.mktemp("mixed")
    rng = np.random.default_rng(0)
    for split, n in (("train", 24), ("val", 8)):
        (root / "images" / split).mkdir(parents=True)
        (root / "labels" / split).mkdir(parents=True)
        for i in range(n):
            h, w = SIZES[i % len(SIZES)]
            image = np.full((h, w, 3), 90, np.uint8)
            rows = []
            for _ in range(1 + i % 2):
                cls = int(rng.integers(0, 3))
                bw, bh = int(rng.integers(12, w // 2)), int(rng.integers(12, h // 2))
                x, y = int(rng.integers(0, w - bw)), int(rng.integers(0, h - bh))
                image[y:y + bh, x:x + bw] = COLOURS[cls]
                rows.append(f"{cls} {(x + bw / 2) / w:.6f} {(y + bh / 2) / h:.6f} {bw / w:.6f} {bh / h:.6f}")
            Image.fromarray(image).save(root / "images" / split / f"{i:03d}.png")
            (root / "labels" / split / f"{i:03d}.txt").write_text("\n".join(rows) + "\n")
    (root / "data.yaml").write_text(f"path: {root}\ntrain: images/train\nval: images/val\n"
                                    "names:\n  0: red\n  1: green\n  2: blue\n")
    return root / "data.yaml"


def test_layer_names_and_freeze_by_count_or_name() -> None:
    net = LibreYOLO("LibreYOLO9t.yaml").net
    layers = layer_names(net)
    assert layers[:3] == ["backbone.conv0", "backbone.conv1", "backbone.elan1"] and layers[-1] == "head.cv3"
    frozen = freeze_layers(net, 2)
    assert frozen and all(n.startswith(("backbone.conv0.", "backbone.conv1.")) for n in frozen)
    assert not net.backbone.conv0.conv.weight.requires_grad and net.backbone.elan1.parameters().__next__().requires_grad
    net = LibreYOLO("LibreYOLO9t.yaml").net
    frozen = freeze_layers(net, ["backbone"])
    assert len(frozen) == sum(1 for _ in net.backbone.parameters())
    assert all(p.requires_grad for p in net.head.parameters())
    with pytest.raises(ConfigError, match=r"freeze=99 is more than the network's 18 layers"):
        freeze_layers(net, 99)
    with pytest.raises(ConfigError, match=r"'bakcbone' names no parameter"):
        freeze_layers(net, ["bakcbone"])


def test_option_values_are_checked() -> None:
    with pytest.raises(ConfigError, match=r"fraction=0.0 must be in \(0, 1\]"):
        TrainConfig(data="shapes", fraction=0.0)
    with pytest.raises(ConfigError, match=r"freeze=-1"):
        TrainConfig(data="shapes", freeze=-1)
    assert TrainConfig(data="shapes", rect="val").rect == "val"
    from libreyolo_models.config import load_config

    cfg = load_config(TrainConfig, {"data": "shapes", "freeze": "backbone,neck.elan_up1", "rect": "true"}, "cli")
    assert cfg.freeze == ["backbone", "neck.elan_up1"] and cfg.rect is True
    assert load_config(TrainConfig, {"data": "shapes", "freeze": "10"}, "cli").freeze == 10


def test_single_cls_and_fraction_change_what_the_task_reads(mixed_shapes) -> None:
    model = LibreYOLO("LibreYOLO9t.yaml")
    task = OptionedTask.for_training(model.task_spec, TrainConfig(data=str(mixed_shapes), single_cls=True,
                                                                  fraction=0.25), 32)
    data = task.load_data(str(mixed_shapes))
    assert data.nc == 1 and data.names == {0: "object"}
    train = task.load_split(data, "train")
    assert len(train) == 6 and train.images == sorted(train.images)     # a quarter, in order
    assert all((lab[:, 0] == 0).all() for lab in train.labels)
    assert len(task.load_split(data, "val")) == 8                       # validation stays whole
    full = load_split(str(mixed_shapes), "train")
    assert take_fraction(full, 0.25, 0).images == train.images          # seeded: the same quarter
    assert take_fraction(full, 0.25, 1).images != train.images
    with pytest.raises(ConfigError, match=r"single_cls=True trains every object as one class; a 'classify' model"):
        OptionedTask(LibreYOLO("LibreMobileNetV4small.yaml").task_spec, single_cls=True)
    with pytest.raises(ConfigError, match=r"rect= makes rectangular batches .* a 'segment' model"):
        OptionedTask(get_task("segment"), rect=True)


def test_fraction_keeps_classification_labels_an_array(tmp_path: Path) -> None:
    """A classification split keeps its labels in one array: fraction= cuts it as such."""
    from libreyolo_models.tasks.classify.shapes_cls import generate_shapes_cls

    generate_shapes_cls(tmp_path, split_sizes={"train": 10, "val": 1})
    task = OptionedTask(get_task("classify"), fraction=0.3, seed=0)
    full = get_task("classify").load_split(task.load_data(str(tmp_path)), "train")
    part = task.load_split(task.load_data(str(tmp_path)), "train")
    assert isinstance(part.labels, np.ndarray) and len(part.labels) == len(part.images) < len(full.images)
    position = {path: i for i, path in enumerate(full.images)}
    assert [full.labels[position[p]] for p in part.images] == part.labels.tolist()  # each image keeps its class


@pytest.mark.parametrize("task_name", ["segment", "pose"])
def test_single_cls_merges_the_classes_of_an_instance_task(task_name: str) -> None:
    task = OptionedTask(get_task(task_name), single_cls=True)
    bundled = {"segment": "shapes-inst", "pose": "shapes-pose"}[task_name]
    data = task.load_data(bundled)
    assert data.nc == 1 and data.names == {0: "object"}
    split = task.load_split(data, "val")
    assert split.names == {0: "object"} and all((lab[:, 0] == 0).all() for lab in split.labels)
    assert len(split.extras) == len(split.labels)  # masks / keypoints kept, object by object


def test_fraction_keeps_each_image_with_its_mask(tmp_path) -> None:
    from libreyolo_models.tasks import get_task
    from libreyolo_models.tasks.semantic.shapes_seg import generate_shapes_seg

    generate_shapes_seg(tmp_path, split_sizes={"train": 8, "val": 1})
    task = OptionedTask(get_task("semantic"), fraction=0.5, seed=0)
    data = task.load_data(str(tmp_path / "data.yaml"))
    half = task.load_split(data, "train")
    assert len(half) == len(half.masks) == len(half.sizes) == 4
    assert all(i.stem == m.stem for i, m in zip(half.images, half.masks, strict=True))


def test_rect_samples_sit_on_their_own_rectangle_with_their_boxes(mixed_shapes, tmp_path) -> None:
    index = load_split(str(mixed_shapes), "val")
    cache = open_image_cache(index.images, 128, mode="ram")
    samples = RectSamples(cache, index, stride=32)
    assert list(rect_order(cache.hw)) == list(samples.order)
    shapes = [tuple(samples[i].image.shape[1:]) for i in range(len(samples))]
    assert (128, 64) in shapes and (64, 128) in shapes and (96, 128) in shapes      # not squares
    ratios = [h / w for h, w in shapes]
    assert ratios == sorted(ratios)                                                   # aspect order
    for i in range(len(samples)):
        s = samples[i]
        h, w = s.image.shape[1:]
        for cls, cx, cy, _, _ in s.targets.tolist():    # every box lies on its colour
            x, y = int(cx * w), int(cy * h)
            assert tuple(s.image[:, y, x].tolist()) == COLOURS[int(cls)], (i, cls)
    batch = collate_rect([samples[0], samples[len(samples) - 1]])
    assert batch.images.shape[2:] == (128, 128)            # the batch's largest rectangle
    b = batch.targets[batch.targets[:, 0] == 1][0]
    x, y = int(b[2] * 128), int(b[3] * 128)
    assert tuple(batch.images[1, :, y, x].tolist()) == COLOURS[int(b[1])]


def test_all_options_train_and_val_rect_runs(mixed_shapes, tmp_path, caplog) -> None:
    seen: list[object] = []
    model = LibreYOLO(LibreYOLO("LibreYOLO9t.yaml").save(tmp_path / "start.pt"))  # weights kept, not re-seeded
    start = {k: v.clone() for k, v in model.net.state_dict().items() if k.startswith("backbone.conv0")}
    model.add_callback("on_fit_epoch_end", seen.append)
    model.add_callback(TrainStart, seen.append)
    model.add_callback("on_train_end", lambda e: 1 / 0)    # a failing callback: logged, training goes on
    with caplog.at_level(logging.INFO):
        outcome = model.train(data=str(mixed_shapes), epochs=2, imgsz=128, batch=4, nbs=4, workers=0, device="cpu",
                              project=str(tmp_path), verbose=False, plots=False, freeze=2, single_cls=True,
                              fraction=0.5, rect=True, close_mosaic=0)
    assert [type(e) for e in seen] == [TrainStart, EpochEnd, EpochEnd]
    assert seen[1].metrics["epoch"] == 1 and "metrics/mAP50" in seen[1].metrics
    assert model.nc == 1 and model.names == {0: "object"}
    after = model.net.state_dict()
    assert all(torch.equal(after[k], v) for k, v in start.items() if not k.endswith(("running_mean", "running_var",
                                                                                      "num_batches_tracked")))
    assert "fraction=0.5: training on 12 of the 24 images" in caplog.text
    assert "rectangular batches of 4" in caplog.text
    assert "add_callback" not in caplog.text and "ZeroDivisionError" in caplog.text
    assert outcome.epochs_run == 2
    metrics = model.val(data=str(mixed_shapes), imgsz=128, batch=4, workers=0, device="cpu", rect=True,
                        single_cls=True, verbose=False)
    square = model.val(data=str(mixed_shapes), imgsz=128, batch=4, workers=0, device="cpu", single_cls=True,
                       verbose=False)
    assert metrics.n_images == square.n_images == 8
    with pytest.raises(ConfigError, match=r"val\(single_cls=True\) validates a model trained with single_cls=True "
                                          r"\(one class\); this model predicts 80 classes"):
        LibreYOLO("LibreYOLO9t.yaml").val(data=str(mixed_shapes), single_cls=True)


def test_add_callback_names_the_events() -> None:
    model = LibreYOLO("LibreYOLO9t.yaml")
    with pytest.raises(ConfigError, match=r"'on_fit_epoch_ned'.*did you mean 'on_fit_epoch_end'"):
        model.add_callback("on_fit_epoch_ned", print)
    with pytest.raises(ConfigError, match=r"not a training event class"):
        model.add_callback(int, print)
    assert model.add_callback("on_prediction_images", print).callbacks[0].wants_prediction_images
