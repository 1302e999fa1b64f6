"""The export targets beyond ONNX / TorchScript / OpenVINO (issue 46): NCNN, TFLite, CoreML,
TensorRT, and INT8 quantisation with calibration images for OpenVINO (NNCF) and ONNX Runtime.

Each round trip is YOLOv9-t (untrained, biases spread as in test_export.py) at 64 px against
PyTorch: the seam at batch 3 (run in chunks of the exported batch), detections on the sample
image and 20 ``shapes`` images (same classes, box IoU >= 0.99, scores within 1e-3), and val
within 0.005 mAP. CoreML converts on Linux but runs on macOS only: its spec is checked instead.
TensorRT needs a GPU and is marked ``cuda``. A test whose extra is not installed is skipped with
the extra's name. INT8's accuracy on a trained model is a recorded measurement (docs/export.md);
here the quantised files are checked to load, to hold int8 arithmetic and to stay near fp32.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from export_checks import assert_same_detections, yolo9_with_spread_biases

from libreyolo_models import SAMPLE_IMAGE, ConfigError, LibreYOLO

IMGSZ = 64
NAMES = ["a", "b", "c", "d", "e"]


def needs(module: str, extra: str) -> None:
    """Skip naming ``extra`` when ``module`` is absent. Looked up, not imported: importing onnx2tf
    here would load TensorFlow before Triton, which aborts the process (``optional.preload_triton``)."""
    import importlib.util

    if importlib.util.find_spec(module.split(".")[0]) is None:
        pytest.skip(f"the [{extra}] extra is not installed (pip install 'libreyolo[{extra}]')")


@pytest.fixture(scope="module")
def shapes20(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from libreyolo_models.data.shapes import generate_shapes

    root = tmp_path_factory.mktemp("shapes20")
    generate_shapes(root, split_sizes={"train": 8, "val": 20})
    return root / "data.yaml"


@pytest.fixture(scope="module")
def model() -> LibreYOLO:
    return yolo9_with_spread_biases(NAMES, IMGSZ)


def assert_round_trip(model: LibreYOLO, path: Path, data: Path, runtime_kind: str) -> None:
    runtime = LibreYOLO(path)
    assert runtime.info()["runtime"] == runtime_kind and runtime.names == dict(enumerate(NAMES))
    images = torch.rand(3, 3, IMGSZ, IMGSZ, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = model.inference_forward(images)
    got = runtime.inference_forward(images)
    assert got.shape == expected.shape and torch.allclose(got, expected, atol=1e-3, rtol=1e-4), \
        (got - expected).abs().max()
    sources = [SAMPLE_IMAGE, *sorted((data.parent / "images" / "val").glob("*"))]
    ours, theirs = model.predict(sources, conf=0.01, batch=4), runtime.predict(sources, conf=0.01, batch=4)
    assert sum(len(r.boxes) for r in ours) > 50, "too few detections to compare anything"
    for a, b in zip(ours, theirs, strict=True):
        assert_same_detections(a.boxes.data, b.boxes.data)
    options = {"data": str(data), "batch": 8, "conf": 0.001, "workers": 0, "verbose": False}
    mine, exported = model.val(**options), runtime.val(**options)
    assert abs(mine.map50 - exported.map50) <= 0.005 and abs(mine.map50_95 - exported.map50_95) <= 0.005


@pytest.mark.slow
def test_ncnn_round_trip_matches_pytorch(model: LibreYOLO, shapes20: Path, tmp_path: Path) -> None:
    needs("pnnx", "ncnn")
    needs("ncnn", "ncnn")
    path = model.export(format="ncnn", file=str(tmp_path / "y9_ncnn_model"))
    assert sorted(p.name for p in path.iterdir()) == ["libreyolo.json", "model.ncnn.bin", "model.ncnn.param"]
    assert_round_trip(model, path, shapes20, "ncnn")


@pytest.mark.slow
def test_tflite_round_trip_matches_pytorch(model: LibreYOLO, shapes20: Path, tmp_path: Path) -> None:
    needs("onnx2tf", "tflite")
    needs("ai_edge_litert", "tflite")
    path = model.export(format="tflite", file=str(tmp_path / "y9.tflite"))
    assert path.is_file() and path.read_bytes()[4:8] == b"TFL3"  # a flatbuffer with TFLite's identifier
    assert_round_trip(model, path, shapes20, "tflite")


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # coremltools' own docstrings (invalid escapes)
def test_coreml_converts_with_its_inputs_outputs_and_metadata(model: LibreYOLO, tmp_path: Path) -> None:
    needs("coremltools", "coreml")
    from libreyolo_models.export import ExportMetadata
    from libreyolo_models.runtime.coreml_tools import import_coremltools

    path = model.export(format="coreml", file=str(tmp_path / "y9.mlpackage"))
    spec = import_coremltools("test").utils.load_spec(str(path))
    (inp,), (out,) = spec.description.input, spec.description.output
    assert inp.name == "images" and list(inp.type.multiArrayType.shape) == [1, 3, IMGSZ, IMGSZ]
    assert out.name == "output0" and list(out.type.multiArrayType.shape) == [1, 4 + 5, 84]  # 8x8 + 4x4 + 2x2 anchors
    meta = ExportMetadata.from_json(spec.description.metadata.userDefined["libreyolo"], str(path))
    assert (meta.format, meta.family, meta.size, meta.nc, meta.imgsz) == ("coreml", "yolo9", "t", 5, IMGSZ)
    assert meta.names == dict(enumerate(NAMES)) and spec.WhichOneof("Type") == "mlProgram"
    if sys.platform != "darwin":
        with pytest.raises(ConfigError, match="CoreML model.*macOS only.*format='onnx'"):
            LibreYOLO(path)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize(("family", "size"), [("rfdetr", "n"), ("ec", "s")])
def test_set_predictors_convert_to_coreml(family: str, size: str, tmp_path: Path) -> None:
    """RF-DETR's deformable attention samples per level (Core ML takes rank 5 at most) and EC's
    position embedding is the kit's float outer product (Core ML read its matmul as int32)."""
    needs("coremltools", "coreml")
    from libreyolo_models.runtime.coreml_tools import import_coremltools

    model = LibreYOLO(family=family, size=size, nc=3, imgsz=IMGSZ).eval()
    with torch.no_grad():
        expected = model.inference_forward(torch.zeros(1, 3, IMGSZ, IMGSZ))
    path = model.export(format="coreml", file=str(tmp_path / f"{family}.mlpackage"))
    spec = import_coremltools("test").utils.load_spec(str(path))
    (inp,), (out,) = spec.description.input, spec.description.output
    assert list(inp.type.multiArrayType.shape) == [1, 3, IMGSZ, IMGSZ]
    assert list(out.type.multiArrayType.shape) == list(expected.shape)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_network_coreml_cannot_convert_gets_an_error_naming_the_way_out(tmp_path: Path) -> None:
    """D-FINE's distribution integral is a linear layer whose weight is computed, which Core ML's
    converter cannot take: the user gets our error, not coremltools' bare assertion."""
    needs("coremltools", "coreml")
    model = LibreYOLO(family="dfine", size="n", nc=3, imgsz=128)
    with pytest.raises(ConfigError, match=r"coremltools could not convert the dfine network.*format='onnx'"):
        model.export(format="coreml", file=str(tmp_path / "dfine.mlpackage"))


def test_ncnn_names_the_operators_it_has_no_layer_for(tmp_path: Path) -> None:
    from libreyolo_models.export.ncnn import refuse_unconverted, unconverted_ops

    param = tmp_path / "model.ncnn.param"
    param.write_text("7767517\n4 4\nInput in0 0 1 in0\nConvolution conv 1 1 in0 a 0=8\n"
                     "torch.topk topk 1 2 a b c\nTensor.reshape view 1 1 b d\n")
    assert unconverted_ops(param) == ["Tensor.reshape", "torch.topk"]
    with pytest.raises(ConfigError, match=r"NCNN has no layer for Tensor.reshape, torch.topk in the ec network.*"
                                          r"format='onnx'"):
        refuse_unconverted(param, "ec")


@pytest.mark.slow
def test_ncnn_refuses_a_set_predictor_and_leaves_nothing_behind(tmp_path: Path) -> None:
    """EC selects its queries with top-k, which NCNN has no layer for: the export says so rather
    than write files that fail only when loaded."""
    needs("pnnx", "ncnn")
    model = LibreYOLO(family="ec", size="s", nc=3, imgsz=IMGSZ)
    with pytest.raises(ConfigError, match="torch.topk"):
        model.export(format="ncnn", file=str(tmp_path / "ec_ncnn_model"))
    assert not (tmp_path / "ec_ncnn_model").exists()


@pytest.mark.slow
def test_int8_openvino_through_nncf_loads_holds_int8_and_stays_near_fp32(model: LibreYOLO, shapes20: Path,
                                                                       tmp_path: Path) -> None:
    needs("nncf", "nncf")
    path = model.export(format="openvino", int8=True, data=str(shapes20), calib_images=8,
                        file=str(tmp_path / "y9_int8_openvino_model"))
    runtime = LibreYOLO(path)
    assert runtime.info()["precision"] == "int8"
    assert json.loads((path / "libreyolo.json").read_text())["extra"]["calibration"] == {"data": str(shapes20),
                                                                                        "images": 8}
    assert "FakeQuantize" in (path / "model.xml").read_text()  # NNCF's quantise-dequantise pairs
    _assert_near(model, runtime)


@pytest.mark.slow
def test_int8_onnx_through_the_static_quantiser_loads_holds_int8_and_stays_near_fp32(
        model: LibreYOLO, shapes20: Path, tmp_path: Path) -> None:
    needs("onnxruntime", "onnx")
    import onnx

    path = model.export(format="onnx", int8=True, data=str(shapes20), calib_images=8, file=str(tmp_path / "q.onnx"))
    ops = {node.op_type for node in onnx.load(str(path)).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    runtime = LibreYOLO(path)
    assert runtime.info()["precision"] == "int8"
    _assert_near(model, runtime)


def _assert_near(model: LibreYOLO, runtime: LibreYOLO) -> None:
    """Boxes within a few pixels and class scores within a few hundredths of fp32's, in the median
    (an untrained head, calibrated on 8 images: accuracy on a trained model is in docs/export.md)."""
    images = torch.rand(2, 3, IMGSZ, IMGSZ, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        expected = model.inference_forward(images)
    got = runtime.inference_forward(images)
    assert got.shape == expected.shape
    boxes, scores = (got - expected)[:, :4].abs(), (got - expected)[:, 4:].abs()
    assert boxes.median().item() < 2.0 and scores.median().item() < 0.05, (boxes.median(), scores.median())


@pytest.mark.parametrize(("fmt", "module", "extra"), [("ncnn", "pnnx", "ncnn"), ("tflite", "onnx2tf", "tflite"),
                                                      ("coreml", "coremltools", "coreml")])
def test_a_missing_converter_names_its_extra(fmt: str, module: str, extra: str, model: LibreYOLO,
                                             monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ImportError, match=rf"pip install 'libreyolo\[{extra}\]'"):
        model.export(format=fmt, file=str(tmp_path / f"m.{fmt}"))


def test_int8_without_nncf_names_its_extra(model: LibreYOLO, shapes20: Path, monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    needs("openvino", "openvino")
    monkeypatch.setitem(sys.modules, "nncf", None)
    with pytest.raises(ImportError, match=r"pip install 'libreyolo\[nncf\]'"):
        model.export(format="openvino", int8=True, data=str(shapes20), calib_images=1, file=str(tmp_path / "m"))


@pytest.mark.parametrize(("options", "message"), [
    ({"format": "openvino", "int8": True}, r"int8=True needs data=\.\.\."),
    ({"format": "tflite", "int8": True, "data": "shapes"}, "format='tflite' has no INT8 path.*'openvino'.*'onnx'"),
    ({"format": "onnx", "int8": True, "half": True, "data": "shapes"}, "pass one of them"),
    ({"format": "ncnn", "dynamic": True}, "ncnn export is written for one batch and image size.*onnx, torchscript"),
    ({"format": "ncnn", "batch": 4}, "one image per call.*leave batch at 1"),
    ({"format": "engine"}, r"TensorRT engine for the NVIDIA GPU.*device=0.*libreyolo\[tensorrt\]"),
    ({"format": "tensorflow"}, "not an export format.*ncnn, tflite, coreml, engine"),
])
def test_bad_target_options_are_refused_before_any_work(options: dict, message: str, model: LibreYOLO) -> None:
    if options["format"] == "engine" and torch.cuda.is_available():
        options = {**options, "device": "cpu"}
    with pytest.raises(ConfigError, match=message):
        model.export(**options)


@pytest.mark.cuda
def test_tensorrt_engine_round_trip_on_the_gpu(model: LibreYOLO, tmp_path: Path) -> None:
    """Built and run on the GPU (fp32 and fp16, dynamic batch); never run on the CPU machines."""
    needs("tensorrt", "tensorrt")
    gpu = LibreYOLO(family="yolo9", size="t", nc=5, names=NAMES, imgsz=IMGSZ)
    gpu.net.load_state_dict(model.net.state_dict())
    gpu.to(0).eval()
    images = torch.rand(4, 3, IMGSZ, IMGSZ, generator=torch.Generator().manual_seed(4)).cuda()
    with torch.no_grad():
        expected = gpu.inference_forward(images)
    path = gpu.export(format="engine", dynamic=True, device="0", file=str(tmp_path / "y9_engine_model"))
    runtime = LibreYOLO(path).to(0)
    assert runtime.info()["runtime"] == "tensorrt" and runtime.runs_only_on == "cuda"
    got = runtime.inference_forward(images)
    assert got.device.type == "cuda" and torch.allclose(got, expected, atol=1e-2, rtol=1e-3)
    assert_same_detections(gpu.predict(SAMPLE_IMAGE, conf=0.01)[0].boxes.data.cpu(),
                           runtime.predict(SAMPLE_IMAGE, conf=0.01)[0].boxes.data.cpu(), iou=0.98, score=1e-2)
    half = LibreYOLO(gpu.export(format="engine", half=True, device="0", file=str(tmp_path / "h_engine_model"))).to(0)
    assert half.info()["precision"] == "fp16"
    assert torch.allclose(half.inference_forward(images[:1]).float(), expected[:1], atol=0.5, rtol=1e-2)
