"""The ``prompt-segment`` task: prompt parsing and errors, upstream's resize and coordinate
transforms, mask upsampling to the picture, the shapes of points / boxes / multimask outputs,
``Results.masks`` (``PromptMasks``) and the command line. A tiny SAM runs everything (64 px)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from libreyolo_models import LibreYOLO
from libreyolo_models.contract.prompts import (
    PromptImage,
    logits_to_picture,
    outside_picture,
    resized_shape,
    to_input_coords,
)
from libreyolo_models.errors import ConfigError
from libreyolo_models.families.sam import nn as sam_nn
from libreyolo_models.families.sam.nn import SamArch
from libreyolo_models.tasks import get_task
from libreyolo_models.tasks.prompt_segment.prompt_masks import PromptMasks
from libreyolo_models.tasks.prompt_segment.prompt_options import parse_prompts
from libreyolo_models.tasks.prompt_segment.resize import square_input

TINY = SamArch(32, 2, 2, (1,), grid=4, window=2)


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> LibreYOLO:
    monkeypatch.setitem(sam_nn.ARCHS, "b", TINY)
    torch.manual_seed(0)
    return LibreYOLO(family="sam", size="b")


def picture(h: int = 48, w: int = 80) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (h, w, 3), dtype=np.uint8)


def test_resize_follows_upstream_longest_side_rule() -> None:
    assert resized_shape(480, 640, 1024) == (768, 1024)
    assert resized_shape(1200, 1800, 1024) == (683, 1024)  # 682.67 rounds half up
    assert resized_shape(1000, 333, 1024) == (1024, 341)
    x, info = square_input(torch.from_numpy(picture(30, 60)), 64, torch.float32)
    assert info == PromptImage((30, 60), (32, 64), 64)
    assert x.shape == (3, 64, 64)
    mean = torch.tensor((0.485, 0.456, 0.406)).view(3, 1)
    assert torch.equal(x[:, 32:, :].reshape(3, -1), mean.expand(3, 32 * 64))  # bottom pad: the pixel mean
    assert torch.equal(x[:, :32] * 255, (x[:, :32] * 255).round())  # 8-bit values, as PIL's resize leaves them


def test_prompt_coordinates_scale_per_axis() -> None:
    image = PromptImage((480, 640), (768, 1024), 1024)
    xy = to_input_coords(torch.tensor([[[320.0, 240.0], [640.0, 0.0]]]), image)
    assert torch.allclose(xy, torch.tensor([[[512.0, 384.0], [1024.0, 0.0]]]))


def test_logits_are_cut_to_the_picture_then_resized() -> None:
    """Logits positive only over the pad (right half of the square) give an empty mask."""
    image = PromptImage((10, 20), (32, 64), 64)  # wide picture: rows 32.. are pad
    logits = torch.full((1, 1, 16, 16), -5.0)
    logits[..., 8:, :] = 5.0  # the pad rows
    assert not (logits_to_picture(logits, image) > 0).any()
    logits[..., :8, :] = 5.0
    full = logits_to_picture(logits, image)
    assert full.shape == (1, 1, 10, 20) and (full > 0).all()


def test_prompt_forms_and_errors() -> None:
    one = parse_prompts({"points": [10, 20]})
    assert one.points is not None and one.points.shape == (1, 1, 2) and one.labels is not None
    assert one.labels.tolist() == [[1]]
    grouped = parse_prompts({"points": "[[[1,2],[3,4]],[[5,6],[7,8]]]", "labels": [[1, 0], [1, 1]],
                             "boxes": [[0, 0, 9, 9], [1, 1, 5, 5]], "multimask_output": False})
    assert grouped.points.shape == (2, 2, 2) and grouped.boxes.shape == (2, 4)
    assert grouped.count == 2 and not grouped.multimask
    assert parse_prompts({"boxes": np.array([1, 2, 3, 4])}).boxes.shape == (1, 4)
    assert parse_prompts({}).count == 0  # predict refuses it (below); quantize's check runs the encoder alone
    for options, match in [({"points": "[[1,2"}, "not a list"), ({"points": [[1, 2, 3]]}, "shape"),
                           ({"points": [[1, 2]], "labels": [2]}, "labels"), ({"labels": [1]}, "pass points"),
                           ({"boxes": [[5, 5, 1, 1]]}, "x2 >= x1"), ({"boxes": [[0, 0, float("nan"), 1]]}, "finite"),
                           ({"points": [[[1, 2]], [[3, 4]]], "boxes": [[0, 0, 5, 5]] * 3}, "as many groups")]:
        with pytest.raises(ConfigError, match=match):
            parse_prompts(options)


def test_points_boxes_and_multimask_shapes(model: LibreYOLO) -> None:
    image = picture()
    res = model(image, imgsz=64, points=[[10, 20], [30, 5]], labels=[1, 0])[0]
    assert res.masks.data.shape == (1, 3, 48, 80) and res.masks.data.dtype == torch.bool
    assert res.masks.scores.shape == (1, 3) and res.masks.logits.shape == (1, 3, 16, 16)
    res = model(image, imgsz=64, boxes=[[1, 2, 30, 40], [5, 5, 60, 40]], multimask_output=False)[0]
    assert res.masks.data.shape == (2, 1, 48, 80) and len(res) == 2
    res = model(image, imgsz=64, points=[[10, 20]], boxes=[0, 0, 40, 40])[0]
    assert res.masks.data.shape == (1, 3, 48, 80)
    assert torch.equal(res.masks.full_logits() > 0, res.masks.data)


def test_results_content(model: LibreYOLO, tmp_path: Path) -> None:
    res = model(picture(), imgsz=64, boxes=[[1, 2, 30, 40], [5, 5, 60, 40]])[0]
    assert isinstance(res.masks, PromptMasks) and res.masks is res._content() and res.boxes is None
    assert res.summary().startswith("2 prompt(s), 3 masks each")
    rows = json.loads(res.to_json())
    assert len(rows) == 6 and set(rows[0]) == {"prompt", "mask", "score", "area", "x1", "y1", "x2", "y2"}
    assert rows[0]["area"] == int(res.masks.data[0, 0].sum())
    assert res.to_csv().splitlines()[0].startswith("prompt,mask,score")
    plotted = res.plot()
    assert plotted.shape == (48, 80, 3) and plotted.dtype == np.uint8
    assert res.save(tmp_path / "out.jpg").is_file()
    best = res.masks.best()
    assert best.shape == (2, 48, 80)
    as_numpy = res.numpy()
    assert isinstance(as_numpy.masks.data, np.ndarray) and isinstance(res.cpu().masks.data, torch.Tensor)


def test_a_prompt_outside_the_picture_is_refused_with_its_size(model: LibreYOLO) -> None:
    image = picture()  # 80 wide, 48 high
    for options, named in [({"points": [[0.5, 0.5], [100, 20]]}, r"point \(100, 20\)"),
                           ({"boxes": [[81, 0, 120, 40]]}, r"box \(81, 0, 120, 40\)")]:
        with pytest.raises(ConfigError, match=named + r" lies outside the 80x48 picture; points= and boxes= are in "
                                                      r"the picture's pixels"):
            model(image, imgsz=64, **options)
    assert outside_picture(parse_prompts({"points": [[80, 48]], "boxes": [[-5, -5, 2, 2]]}), (48, 80)) is None


def test_a_previous_calls_logits_refine_as_a_mask_prompt(model: LibreYOLO) -> None:
    image = picture()
    first = model(image, imgsz=64, points=[[[10, 20]], [[40, 30]]])[0].masks
    logits = first.best_logits()
    assert logits.shape == (2, 1, 16, 16)
    assert torch.equal(logits[1, 0], first.logits[1, int(first.scores[1].argmax())])
    again = model(image, imgsz=64, points=[[[10, 20]], [[40, 30]]], mask_input=logits, multimask_output=False)[0].masks
    plain = model(image, imgsz=64, points=[[[10, 20]], [[40, 30]]], multimask_output=False)[0].masks
    assert again.data.shape == (2, 1, 48, 80) and not torch.equal(again.logits, plain.logits)  # the mask counts
    alone = model(image, imgsz=64, mask_input=logits[0, 0])[0].masks  # a mask prompt by itself: one prompt
    assert alone.data.shape == (1, 3, 48, 80) and not alone.automatic
    encoder = model.net.prompt_encoder
    _, dense = encoder(None, None, (64, 64), (4, 4), logits)
    assert torch.equal(dense, encoder.mask_downscaling(logits))  # upstream's _embed_masks
    for options, message in [({"mask_input": torch.zeros(1, 1, 32, 32)}, r"32x32 logits, but at imgsz=64 the "
                                                                          r"decoder takes 16x16"),
                             ({"points": [[[1, 2]], [[3, 4]]], "mask_input": torch.zeros(3, 16, 16)},
                              r"3 masks for 2 prompts"),
                             ({"mask_input": "[[0.5]]"}, r"command line cannot pass"),
                             ({"mask_input": torch.zeros(2, 16, 8)}, r"not \[s, s\]"),
                             ({"mask_input": torch.zeros(16, 16), "points_per_side": 4}, r"mask_input= is a prompt")]:
        with pytest.raises(ConfigError, match=message):
            model(image, imgsz=64, **options)


def test_prompts_are_refused_for_other_tasks(model: LibreYOLO) -> None:
    model.quantize("bf16")  # its check predicts without prompts: the encoder alone
    assert model(picture(), imgsz=64, points=[[1, 2]])[0].masks.data.shape == (1, 3, 48, 80)
    detector = LibreYOLO("LibreYOLO9t.yaml")
    with pytest.raises(ConfigError, match="prompt-segment"):
        detector(picture(), imgsz=64, points=[[1, 2]])
    with pytest.raises(ConfigError, match=r"points_per_side= is an option of a promptable segmenter .*'detect'"):
        detector(picture(), imgsz=64, points_per_side=8)
    assert get_task("prompt-segment").prompted and not get_task("detect").prompted


def test_cli_predict_with_points(model: LibreYOLO, tmp_path: Path) -> None:
    from libreyolo_cli.main import main

    weights = model.save(tmp_path / "LibreSAMb.pt")
    source = tmp_path / "img.jpg"
    Image.fromarray(picture()).save(source)
    code = main(["predict", f"model={weights}", f"source={source}", "imgsz=64", "points=[[10,20]]",
                 "multimask_output=false", "--save", f"project={tmp_path}", "name=run"])
    assert code == 0
    assert (tmp_path / "run" / "img.jpg").is_file()
    code = main(["predict", f"model={weights}", f"source={source}", "imgsz=64", "boxes=[[1,2,30,40]]"])
    assert code == 0
    code = main(["predict", f"model={weights}", f"source={source}", "imgsz=64", "points_per_side=4",
                 "pred_iou_thresh=0", "stability_score_thresh=0", "--save", f"project={tmp_path}", "name=auto"])
    assert code == 0 and (tmp_path / "auto" / "img.jpg").is_file()  # no prompts: everything, drawn
