"""Prediction: every source kind, batching, filters, results formats, plotting, bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from libreyolo_models import SAMPLE_IMAGE, LibreYOLO9, Results, SourceError

IMGSZ = 128


@pytest.fixture(scope="module")
def model() -> LibreYOLO9:
    torch.manual_seed(0)
    m = LibreYOLO9(size="t", nc=3, names=["circle", "square", "triangle"], imgsz=IMGSZ)
    with torch.no_grad():  # an untrained head scores everything near zero; lift it so NMS has work
        for seq in m.net.head.cv3:
            seq[-1].bias.copy_(torch.tensor([0.3, 0.7, 0.2]))  # class 1 scores highest everywhere
    return m


@pytest.fixture(scope="module")
def image_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("imgs")
    rng = np.random.default_rng(0)
    for i, (h, w) in enumerate([(90, 120), (120, 80), (64, 64)]):
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(folder / f"im{i}.png")
    (folder / "notes.txt").write_text("not an image")
    return folder


def test_predict_on_the_sample_image_returns_results_in_original_pixels(model) -> None:
    (res,) = model(SAMPLE_IMAGE, conf=0.3, max_det=20)
    assert isinstance(res, Results) and res.orig_shape == (360, 480)
    assert 0 < len(res) <= 20
    xyxy = res.boxes.xyxy
    assert (xyxy[:, 0] >= 0).all() and (xyxy[:, 2] <= 480).all() and (xyxy[:, 3] <= 360).all()
    assert torch.allclose(res.boxes.xywhn * torch.tensor([480, 360, 480, 360]), res.boxes.xywh, atol=1e-3)
    assert set(res.speed) == {"decode", "preprocess", "inference", "postprocess"}
    assert res.source == str(SAMPLE_IMAGE) and res.frame is None
    assert (res.boxes.conf[:-1] >= res.boxes.conf[1:]).all()


def test_every_source_kind_is_accepted(model, image_dir) -> None:
    arr = np.array(Image.open(image_dir / "im0.png"))
    tensor = torch.from_numpy(arr).permute(2, 0, 1).float() / 255
    sources = [str(image_dir / "im0.png"), image_dir, str(image_dir / "*.png"), [image_dir / "im0.png", arr],
               arr, tensor, tensor[None].repeat(2, 1, 1, 1), Image.open(image_dir / "im0.png")]
    counts = [len(model(src, conf=0.3)) for src in sources]
    assert counts == [1, 3, 3, 2, 1, 1, 2, 1]


def test_batched_prediction_equals_one_by_one(model, image_dir) -> None:
    # float64 weights: conv kernels round differently per batch size, and at float32 that can flip
    # a borderline NMS decision of an untrained model; the batching logic is what is tested here.
    model64 = LibreYOLO9(size="t", nc=3, imgsz=IMGSZ)
    model64.net.load_state_dict(model.net.state_dict())
    model64.net.double()
    files = sorted(image_dir.glob("*.png"))
    single = [model64(f, conf=0.3)[0] for f in files]
    batched = model64(files, conf=0.3, batch=3)
    for a, b in zip(single, batched):
        assert a.path == b.path and len(a) == len(b)
        assert torch.equal(a.boxes.cls, b.boxes.cls)
        torch.testing.assert_close(a.boxes.data, b.boxes.data, atol=1e-3, rtol=0)


def test_classes_filter_and_max_det(model) -> None:
    (everything,) = model(SAMPLE_IMAGE, conf=0.3)
    (res,) = model(SAMPLE_IMAGE, conf=0.3, classes=[1])
    assert len(res) == len(everything) > 0 and set(res.boxes.cls.tolist()) == {1.0}
    (res,) = model(SAMPLE_IMAGE, conf=0.3, classes=[0, 2])
    assert len(res) == 0
    (res,) = model(SAMPLE_IMAGE, conf=0.3, max_det=3)
    assert len(res) == 3


def test_plot_and_save_write_an_annotated_image(model, tmp_path) -> None:
    (res,) = model(SAMPLE_IMAGE, conf=0.3, max_det=5)
    plotted = res.plot()
    assert plotted.shape == res.orig_img.shape and not np.array_equal(plotted, res.orig_img)
    saved = res.save(tmp_path / "out.jpg")
    assert Image.open(saved).size == (480, 360)


def test_save_option_writes_into_numbered_run_folders(model, tmp_path) -> None:
    model(SAMPLE_IMAGE, conf=0.3, save=True, project=str(tmp_path), name="exp")
    model(SAMPLE_IMAGE, conf=0.3, save=True, project=str(tmp_path), name="exp")
    assert (tmp_path / "exp" / "sample.jpg").is_file() and (tmp_path / "exp2" / "sample.jpg").is_file()
    model(SAMPLE_IMAGE, conf=0.3, save=True, project=str(tmp_path), name="exp", exist_ok=True)  # into exp again
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp", "exp2"]
    val_dir = tmp_path / "val"
    for _ in range(2):
        LibreYOLO9(size="t", nc=5).val(data="shapes", batch=8, imgsz=64, plots=True, project=str(val_dir), name="v",
                                  exist_ok=True, verbose=False)
    assert [p.name for p in val_dir.iterdir()] == ["v"]


@pytest.mark.parametrize(("source", "match"), [
    ("does/not/exist.jpg", "does/not/exist.jpg"),
    (np.zeros((10, 10, 5), dtype=np.uint8), r"shape \(10, 10, 5\)"),
    (torch.zeros(2, 4, 8), r"shape \(2, 4, 8\)"),
    (4.2, "unsupported source type float"),
    ([], "empty"),
])
def test_bad_input_names_the_input(model, source, match) -> None:
    with pytest.raises(SourceError, match=match):
        model(source)


def test_unreadable_image_file_is_named(model, tmp_path) -> None:
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"\xff\xd8\xff not really a jpeg")
    with pytest.raises(SourceError, match="broken.jpg"):
        model(bad)


def test_bad_option_values_are_explained(model) -> None:
    from libreyolo_models import ConfigError

    with pytest.raises(ConfigError, match="imgsz=100 must be a positive multiple of 32; use 96 or 128"):
        model(SAMPLE_IMAGE, imgsz=100)
    with pytest.raises(ConfigError, match="conf=1.5"):
        model(SAMPLE_IMAGE, conf=1.5)
    with pytest.raises(ConfigError, match="did you mean 'max_det'"):
        model(SAMPLE_IMAGE, maxdet=3)


def test_uint8_pixels_are_scaled_inside_the_network_call_exactly_as_validation_scales_them(model) -> None:
    """Predict hands the network its uint8 letterbox (so a graph keeps a uint8 input copy and
    scales inside the capture); the result is the float input's, bit for bit."""
    from libreyolo_models.data.letterbox import to_network_input

    pixels = torch.randint(0, 256, (2, 64, 64, 3), dtype=torch.uint8).permute(0, 3, 1, 2)
    with torch.inference_mode():
        from_pixels = model.inference_forward(pixels)
        from_float = model.inference_forward(to_network_input(pixels))
    leaves = from_pixels if isinstance(from_pixels, tuple | list) else (from_pixels,)
    expected = from_float if isinstance(from_float, tuple | list) else (from_float,)
    assert all(torch.equal(a, b) for a, b in zip(leaves, expected, strict=True))
