"""PP-OCRv4 mobile and the ``ocr`` task: the converted weights against onnxruntime (skipped without
RapidOCR's ONNX files), the network layout the converter maps into, DB boxes, CTC decoding,
``Results.ocr``, predict on the CPU and the refusals (train, val, CUDA graphs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from ppocr_weights import CLS, DET, REC, converted_weights

from libreyolo_models import LibreYOLO
from libreyolo_models.data.errors import DataConfigError
from libreyolo_models.errors import ConfigError
from libreyolo_models.families.ppocr.ctc import characters, greedy_decode
from libreyolo_models.families.ppocr.db_boxes import DBOptions, reading_order, text_boxes
from libreyolo_models.families.ppocr.nn import PPOCRNet
from libreyolo_models.families.ppocr.onnx_weights import _slots, call_order
from libreyolo_models.families.ppocr.recognize import bucket_width
from libreyolo_models.tasks import get_task
from libreyolo_models.tasks.ocr.task import network_size
from libreyolo_models.tasks.ocr.text_lines import TextLines


@pytest.fixture(scope="module")
def converted() -> tuple[PPOCRNet, Path]:
    return converted_weights()


def test_converted_detector_matches_onnxruntime(converted: tuple[PPOCRNet, Path]) -> None:
    from libreyolo_models.families.ppocr.parity import run_onnx

    net, folder = converted
    g = torch.Generator().manual_seed(1)
    for h, w in ((96, 160), (64, 128)):
        x = torch.rand(1, 3, h, w, generator=g)
        with torch.no_grad():
            diff = (net(x) - run_onnx(folder / DET, x)[:, 0]).abs().max()
        assert float(diff) <= 1e-4


def text_font(size: int) -> Any:
    """DejaVu Sans from matplotlib's data (a test dependency), so the rendered text, and what the
    recogniser reads in it, does not depend on the fonts a machine has installed."""
    import matplotlib
    from PIL import ImageFont

    return ImageFont.truetype(str(Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"), size)


def _render(text: str, height: int = 48) -> torch.Tensor:
    from PIL import Image, ImageDraw

    font = text_font(30)
    image = Image.new("RGB", (320, height), "white")
    ImageDraw.Draw(image).text((8, height // 2), text, fill="black", font=font, anchor="lm")
    return torch.from_numpy(np.array(image)).permute(2, 0, 1).float().div(255)


def test_converted_recogniser_reads_rendered_text_as_onnxruntime_does(converted: tuple[PPOCRNet, Path]) -> None:
    from libreyolo_models.families.ppocr.parity import run_onnx

    net, folder = converted
    words = ["LibreYOLO", "2026", "hello", "OCR"]
    lines = torch.stack([_render(w) for w in words])
    with torch.no_grad():
        ours = greedy_decode(net.recognize(lines))
    theirs = greedy_decode(run_onnx(folder / REC, lines))
    assert [t for t, _ in ours] == [t for t, _ in theirs]
    # the model itself is not perfect on a short word in a wide blank line ("OCR" reads "OCR" plus a
    # stray character with both runtimes); the three longer ones it reads exactly
    assert [t for t, _ in ours[:3]] == words[:3]
    assert all(s > 0.8 for _, s in ours[:3])


def test_converted_angle_classifier_matches_onnxruntime_and_turns_upside_down_lines(
        converted: tuple[PPOCRNet, Path]) -> None:
    from libreyolo_models.families.ppocr.parity import run_onnx
    from libreyolo_models.families.ppocr.recognize import upright

    net, folder = converted
    x = torch.rand(3, 3, 48, 192, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert float((net.classify_angle(x) - run_onnx(folder / CLS, x)).abs().max()) <= 1e-4
    line = (_render("upright text").permute(1, 2, 0) * 255).round().to(torch.uint8).numpy()
    flipped = np.ascontiguousarray(line[::-1, ::-1])
    turned = upright(net, [line, flipped], device=torch.device("cpu"), dtype=torch.float32)
    np.testing.assert_array_equal(turned[0], line)      # left alone
    np.testing.assert_array_equal(turned[1], line)      # turned back


def test_converted_model_reads_a_rendered_page(converted: tuple[PPOCRNet, Path], tmp_path: Path) -> None:
    """The whole pipeline on real weights, converted by the user's command's function: boxes in
    reading order, each line read exactly."""
    pytest.importorskip("cv2")
    from PIL import Image, ImageDraw

    from libreyolo_models.convert import convert_ppocr

    _, folder = converted
    saved = convert_ppocr(folder, tmp_path / "LibrePPOCRm.pt")
    page = Image.new("RGB", (480, 160), "white")
    draw = ImageDraw.Draw(page)
    font = text_font(28)
    draw.text((20, 20), "first line", fill="black", font=font)
    draw.text((60, 90), "second line", fill="black", font=font)
    result = LibreYOLO(str(saved)).predict(np.array(page))[0]
    assert result.ocr.texts == ["first line", "second line"]
    polys = np.asarray(result.ocr.polygons)
    assert polys[0, 0, 1] < polys[1, 0, 1] and (polys[..., 0] <= 480).all()


def test_layout_and_call_order_mapping_cover_every_tensor() -> None:
    """The converter maps by call order: every float tensor of the network is reached exactly once,
    and the counts are the published graphs' (234 parameter tensors each)."""
    net = PPOCRNet(len(characters())).eval()
    det = [t for m in call_order(net.det, lambda: net.det(torch.zeros(1, 3, 64, 64))) for _, t in _slots(m)]
    rec = [t for m in call_order(net.rec, lambda: net.rec(torch.zeros(1, 3, 48, 64))) for _, t in _slots(m)]
    angle = [t for m in call_order(net.angle, lambda: net.angle(torch.zeros(1, 3, 48, 192))) for _, t in _slots(m)]
    assert len(det) == 234 and len(rec) == 234 and len(angle) == 213
    floats = [t for t in net.state_dict().values() if t.is_floating_point()]
    assert len(det) + len(rec) + len(angle) == len(floats)
    state = net.state_dict()
    assert tuple(state["rec.classifier.weight"].shape) == (6625, 120)  # blank + 6623 characters + space
    assert tuple(state["det.head_up2.weight"].shape) == (24, 1, 2, 2)
    assert tuple(state["det.project.3.weight"].shape) == (360, 384, 1, 1)
    assert tuple(state["rec.backbone.stages.4.0.dw.conv.weight"].shape) == (240, 1, 5, 5)
    assert len(characters()) == 6625 and characters()[0] == "" and characters()[-1] == " "


def test_network_shapes() -> None:
    net = PPOCRNet(len(characters())).eval()
    with torch.no_grad():
        assert tuple(net(torch.rand(2, 3, 64, 96)).shape) == (2, 64, 96)
        assert tuple(net.recognize(torch.rand(1, 3, 48, 320)).shape) == (1, 40, 6625)
        assert tuple(net.classify_angle(torch.rand(2, 3, 48, 192)).shape) == (2, 2)


def test_ctc_greedy_decoding_collapses_repeats_and_drops_blanks() -> None:
    alphabet = characters()
    a, b = alphabet.index("a"), alphabet.index("b")
    steps = [a, a, 0, a, b, b, 0, len(alphabet) - 1]
    probs = torch.zeros(1, len(steps), len(alphabet))
    for t, c in enumerate(steps):
        probs[0, t, c] = 0.9
    (text, score), = greedy_decode(probs)
    assert text == "aab " and score == pytest.approx(0.9)
    assert greedy_decode(torch.zeros(1, 3, len(alphabet)).index_fill_(2, torch.tensor([0]), 1.0)) == [("", 0.0)]


def test_db_boxes_grow_a_text_region_by_the_unclip_offset() -> None:
    pytest.importorskip("cv2")
    prob = np.zeros((64, 128), np.float32)
    prob[20:30, 10:90] = 0.9                       # one 80 x 10 text region
    boxes, scores = text_boxes(prob, (2.0, 2.0), (128, 256), DBOptions())
    assert boxes.shape == (1, 4, 2) and 0.75 < scores[0] <= 0.9  # the box border is scored too, as upstream
    # the dilated region is 81 x 11 (contour corners 10..90, 20..30); offset = area * 1.6 / perimeter
    w, h = 80.0, 10.0
    grow = w * h * 1.6 / (2 * (w + h))
    x0, y0 = boxes[0][0]
    x1, y1 = boxes[0][2]
    assert x1 - x0 == pytest.approx(2 * (w + 2 * grow), abs=3)
    assert y1 - y0 == pytest.approx(2 * (h + 2 * grow), abs=3)
    assert text_boxes(np.zeros((32, 32), np.float32), (1.0, 1.0), (32, 32), DBOptions())[0].shape == (0, 4, 2)


def test_reading_order_and_buckets() -> None:
    def box(x: float, y: float) -> np.ndarray:
        return np.array([[x, y], [x + 10, y], [x + 10, y + 5], [x, y + 5]], np.float32)

    boxes = np.stack([box(50, 40), box(60, 3), box(0, 0)])
    assert reading_order(boxes).tolist() == [2, 1, 0]
    assert bucket_width(100) == 320 and bucket_width(330) == 480 and bucket_width(480) == 480


def test_network_size_follows_the_published_resize() -> None:
    assert network_size(48, 320, 736) == (736, 4896)      # short side brought up to 736, multiples of 32
    assert network_size(1000, 800, 736) == (992, 800)     # large enough: only rounded
    assert network_size(10, 10, 32) == (32, 32)


def test_text_lines_content(tmp_path: Path) -> None:
    polys = np.array([[[1, 2], [30, 2], [30, 12], [1, 12]]], np.float32)
    lines = TextLines(polys, ["hi there"], np.array([0.9], np.float32), np.array([0.7], np.float32))
    row = lines.rows({0: "text"})[0]
    assert row["text"] == "hi there" and row["x3"] == 30.0 and row["score"] == pytest.approx(0.9)
    assert set(row) == set(TextLines.csv_columns)
    assert lines.summary({}) == "1 text line: 'hi there'" and lines.text == "hi there" and len(lines) == 1
    drawn = lines.plot(np.zeros((40, 60, 3), np.uint8), {}, labels=True, conf=True)
    assert drawn.shape == (40, 60, 3) and drawn.any()
    assert isinstance(lines.to("cpu").polygons, torch.Tensor) and isinstance(lines.numpy().scores, np.ndarray)
    assert TextLines(np.zeros((0, 4, 2)), [], np.zeros(0), np.zeros(0)).summary({}) == "no text"
    assert lines.label_lines() == ["1.0,2.0,30.0,2.0,30.0,12.0,1.0,12.0,hi there"]
    assert lines.label_lines(save_conf=True)[0].endswith(",hi there,0.900000")


def test_save_txt_writes_the_text_lines(tmp_path: Path) -> None:
    pytest.importorskip("cv2")
    model = LibreYOLO("LibrePPOCRm.yaml")
    model.predict(np.full((40, 90, 3), 255, np.uint8), imgsz=64, save_txt=True, project=str(tmp_path), name="p")
    (label,) = (tmp_path / "p" / "labels").glob("*.txt")  # a file per picture, empty when it has no text
    assert label.read_text().strip() == ""


def test_predict_on_cpu_fills_results_ocr(tmp_path: Path) -> None:
    pytest.importorskip("cv2")
    model = LibreYOLO("LibrePPOCRm.yaml")
    picture = np.full((40, 90, 3), 255, np.uint8)
    result = model.predict(picture, imgsz=64)[0]
    assert isinstance(result.ocr, TextLines)
    for row in json.loads(result.to_json()):
        assert set(row) >= {"text", "score"}
    assert result.plot().shape == (40, 90, 3)


def test_refusals() -> None:
    model = LibreYOLO("LibrePPOCRm.yaml")
    with pytest.raises(ConfigError, match="pretrained-only|predicts only"):
        model.train(data="shapes", epochs=1)
    # refused before any work (no plan, no data), as SAM and depth are
    assert model.task_spec.training_refusal and get_task("depth").training_refusal
    with pytest.raises(DataConfigError, match="'shapes' is the bundled detect set"):
        model.val(data="shapes")
    with pytest.raises(ConfigError, match="needs the model on a CUDA GPU"):  # verified on a GPU, refused on a CPU
        model.predict(np.zeros((32, 32, 3), np.uint8), cuda_graph=True)
    with pytest.raises(ConfigError, match="one class"):
        model.predict(np.zeros((32, 32, 3), np.uint8), classes=[0])


@pytest.mark.cuda
def test_detector_graphs_per_shape_stay_bounded_and_exact() -> None:
    """More distinct input shapes than the runner's cap: each replay equals the eager forward and
    the cache never holds more than the cap (least recently used evicted, counted)."""
    from libreyolo_cudagraph import GraphRunner
    from libreyolo_models.families.ppocr.family import PPOCRFamily
    from libreyolo_models.zoo.registry import get_family

    spec = get_family("ppocr")
    family = PPOCRFamily(spec, "m", "ocr", 1, (64, 64))
    net = PPOCRNet(len(characters())).cuda().eval()
    runner = GraphRunner(lambda x: family.inference_forward(net, x), max_graphs=2, watch=net)
    shapes = [(64, 64), (64, 96), (96, 64), (128, 64), (64, 64)]
    with torch.inference_mode():
        for h, w in shapes * 2:
            x = torch.rand(1, 3, h, w, device="cuda")
            assert torch.equal(runner(x), family.inference_forward(net, x))
            assert len(runner.info().graphs) <= 2
    assert runner.info().evictions >= len(shapes)


def test_onnx_parameter_selection_follows_the_exported_patterns(tmp_path: Path) -> None:
    """Without the real files: a graph written in Paddle2ONNX's patterns (weights as Constant nodes)
    yields exactly the parameter tensors, in node order, and none of the structural constants."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from libreyolo_models.families.ppocr.onnx_weights import onnx_parameters

    consts: dict[str, np.ndarray] = {}
    nodes = []

    def const(name: str, value: np.ndarray, dtype: type = np.float32) -> str:
        consts[name] = value.astype(dtype)
        nodes.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(consts[name], name)))
        return name

    def op(kind: str, inputs: list[str], out: str) -> str:
        nodes.append(helper.make_node(kind, inputs, [out]))
        return out

    r = np.random.default_rng(0)
    y = op("Conv", ["x", const("conv_w", r.random((4, 3, 1, 1))), const("conv_b", r.random(4))], "conv")
    y = op("Mul", [const("lab_scale", np.array([1.5])), y], "lab_mul")            # scale first: a parameter
    y = op("Add", [y, const("lab_bias", np.array([0.1]))], "lab_add")
    y = op("Add", [y, const("three", np.array([3.0]))], "hs_add")                  # hard-swish's +3: not one
    y = op("Div", [y, const("six", np.array([6.0]))], "hs_div")
    y = op("Mul", [y, const("attn_scale", np.array([0.25]))], "scaled")            # scalar second: not one
    y = op("MatMul", [y, const("fc_w", r.random((4, 5)))], "fc")
    y = op("Add", [y, const("fc_b", r.random(5))], "fc_add")
    y = op("Mul", [y, const("ln_w", r.random(5))], "ln_mul")                       # a layer norm's weight
    y = op("Add", [y, const("ln_b", r.random(5))], "ln_add")
    y = op("ConvTranspose", [y, const("up_w", r.random((5, 1, 2, 2)))], "up")
    y = op("Add", [y, const("up_b", r.random((1, 1, 1, 1)))], "up_add")
    shape = const("shape", np.array([1, 1, 1, 1]), np.int64)
    nodes.append(helper.make_node("Reshape", [const("se_b", np.array([0.5])), shape], ["bias4d"]))
    y = op("Conv", [y, const("se_w", r.random((1, 1, 1, 1)))], "se")
    y = op("Add", [y, "bias4d"], "se_add")                                         # a bias reshaped to 4-d
    y = op("BatchNormalization", [y] + [const(f"bn{i}", r.random(1)) for i in range(4)], "bn")
    y = op("Add", [y, const("three_again", np.array(3.0))], "out")                 # +3 after a batch norm
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)])
    model = helper.make_model(graph)
    model.metadata_props.add(key="character", value="a\nb")
    onnx.save(model, str(tmp_path / "g.onnx"))
    params, meta = onnx_parameters(tmp_path / "g.onnx")
    expected = ["conv_w", "conv_b", "lab_scale", "lab_bias", "fc_w", "fc_b", "ln_w", "ln_b", "up_w", "up_b",
                "se_w", "se_b", "bn0", "bn1", "bn2", "bn3"]
    assert len(params) == len(expected)
    for got, name in zip(params, expected):
        np.testing.assert_array_equal(got.ravel(), consts[name].ravel())
    assert meta == {"character": "a\nb"}


def test_missing_weights_name_the_converter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from libreyolo_models.hub import WeightsNotFoundError

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(WeightsNotFoundError, match=r"nc=\.\.\.\)\. PP-OCR's weights are made from RapidOCR's ONNX files: "
                                                   r"python -m libreyolo_models.convert ppocr"):
        LibreYOLO("LibrePPOCRm.pt")


def test_the_converter_command_names_missing_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from libreyolo_models.convert import main

    assert main(["ppocr", "--models", str(tmp_path), "--out", str(tmp_path / "x.pt")]) == 2
    err = capsys.readouterr().err
    assert "ch_PP-OCRv4_det_infer.onnx" in err and "not found" in err and not (tmp_path / "x.pt").exists()
