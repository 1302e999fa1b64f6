"""Export (ONNX, TorchScript, OpenVINO) and the runtime backends that load the files back.

YOLOv9-t is checked in full: detections on the sample image and 20 ``shapes`` validation images
match PyTorch's (same classes, box IoU >= 0.99, scores within 1e-3), validation through the
exported model gives PyTorch's mAP within 0.005, dynamic batch runs at 1 and 8, and a dynamic
export predicts like PyTorch at other image sizes. The other
families get a parity check of the exported seam (test_export_families.py). Image size 64 keeps
every export to seconds of CPU.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from export_checks import assert_same_detections, yolo9_with_spread_biases

from libreyolo_models import SAMPLE_IMAGE, ConfigError, LibreYOLO
from libreyolo_models.errors import CheckpointError

IMGSZ = 64
NAMES = ["a", "b", "c", "d", "e"]  # shapes has five classes


@pytest.fixture(scope="module")
def shapes20(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from libreyolo_models.data.shapes import generate_shapes

    root = tmp_path_factory.mktemp("shapes20")
    generate_shapes(root, split_sizes={"train": 1, "val": 20})
    return root / "data.yaml"


@pytest.fixture(scope="module")
def model() -> LibreYOLO:
    return yolo9_with_spread_biases(NAMES, IMGSZ)


@pytest.fixture(scope="module")
def exported(model: LibreYOLO, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """ONNX, OpenVINO and a second TorchScript file with dynamic batch and image size; TorchScript
    at a fixed batch of 1 and image size of 64 (other batches run in chunks)."""
    out = tmp_path_factory.mktemp("exported")
    return {"onnx": model.export(format="onnx", dynamic=True, simplify=True, file=str(out / "y9.onnx")),
            "torchscript": model.export(format="torchscript", file=str(out / "y9")),  # suffix added
            "openvino": model.export(format="openvino", dynamic=True, file=str(out / "y9_openvino_model")),
            "torchscript-dynamic": model.export(format="torchscript", dynamic=True, file=str(out / "y9d.torchscript"))}


def test_a_file_without_suffix_gets_the_formats_so_it_loads_back(exported: dict[str, Path]) -> None:
    assert exported["torchscript"].name == "y9.torchscript" and exported["openvino"].name == "y9_openvino_model"
    assert LibreYOLO(str(exported["torchscript"])).task == "detect"


def _val_images(data_yaml: Path) -> list[Path]:
    images = sorted((data_yaml.parent / "images" / "val").glob("*"))
    assert len(images) == 20
    return images


@pytest.mark.parametrize("fmt", ["onnx", "torchscript", "openvino"])
def test_exported_detections_match_pytorch(fmt: str, model: LibreYOLO, exported: dict[str, Path],
                                           shapes20: Path) -> None:
    runtime = LibreYOLO(exported[fmt])
    sources = [SAMPLE_IMAGE, *_val_images(shapes20)]
    ours = model.predict(sources, conf=0.01, batch=4)
    theirs = runtime.predict(sources, conf=0.01, batch=4)
    assert sum(len(r.boxes) for r in ours) > 50, "too few detections to compare anything"
    for a, b in zip(ours, theirs, strict=True):
        assert_same_detections(a.boxes.data, b.boxes.data)


@pytest.mark.parametrize("fmt", ["onnx", "torchscript", "openvino"])
def test_val_through_the_exported_model_matches_pytorch(fmt: str, model: LibreYOLO, exported: dict[str, Path],
                                                        shapes20: Path) -> None:
    options = {"data": str(shapes20), "batch": 8, "conf": 0.001, "workers": 0, "verbose": False}
    ours = model.val(**options)
    theirs = LibreYOLO(exported[fmt]).val(**options)  # TorchScript: batch-1 file, run in 8 chunks
    assert ours.n_images == theirs.n_images == 20
    assert abs(ours.map50 - theirs.map50) <= 0.005 and abs(ours.map50_95 - theirs.map50_95) <= 0.005


@pytest.mark.parametrize("fmt", ["onnx", "openvino"])
def test_dynamic_batch_runs_at_1_and_8(fmt: str, model: LibreYOLO, exported: dict[str, Path]) -> None:
    runtime = LibreYOLO(exported[fmt])
    for batch in (1, 8):
        images = torch.rand(batch, 3, IMGSZ, IMGSZ, generator=torch.Generator().manual_seed(batch))
        with torch.no_grad():
            expected = model.inference_forward(images)
        got = runtime.inference_forward(images)
        assert got.shape == expected.shape == (batch, 4 + 5, 84)
        assert torch.allclose(got, expected, atol=1e-3, rtol=1e-4), (got - expected).abs().max()


@pytest.mark.parametrize("fmt", ["onnx", "openvino", "torchscript-dynamic"])
def test_a_dynamic_export_predicts_at_other_sizes_and_batches_like_pytorch(fmt: str, model: LibreYOLO,
                                                                          exported: dict[str, Path],
                                                                          shapes20: Path) -> None:
    """dynamic=True frees height and width: predict letterboxes to the imgsz asked (not the 64 in
    the metadata) and the detections are PyTorch's at that size, one image at a time and 8 at once."""
    runtime = LibreYOLO(exported[fmt])
    sources = [SAMPLE_IMAGE, *_val_images(shapes20)[:7]]
    for imgsz in (IMGSZ, 96):
        ours = model.predict(sources, imgsz=imgsz, conf=0.01, batch=8)
        assert sum(len(r.boxes) for r in ours) > 30, "too few detections to compare anything"
        for batch in (1, 8):
            theirs = runtime.predict(sources, imgsz=imgsz, conf=0.01, batch=batch)
            for a, b in zip(ours, theirs, strict=True):
                assert_same_detections(a.boxes.data, b.boxes.data)
    images = torch.rand(2, 3, 96, 128, generator=torch.Generator().manual_seed(2))  # not square either
    with torch.no_grad():
        expected = model.inference_forward(images)
    got = runtime.inference_forward(images)
    assert got.shape == expected.shape == (2, 4 + 5, 12 * 16 + 6 * 8 + 3 * 4)
    assert torch.allclose(got, expected, atol=1e-3, rtol=1e-4), (got - expected).abs().max()


def test_a_dynamic_export_refuses_a_size_off_the_stride_naming_the_fix(exported: dict[str, Path]) -> None:
    runtime = LibreYOLO(exported["onnx"])
    with pytest.raises(ConfigError, match="imgsz=80 must be a positive multiple of 32; use 64 or 96"):
        runtime.predict(SAMPLE_IMAGE, imgsz=80)
    with pytest.raises(ConfigError, match="imgsz=100 must be a positive multiple of 32; use 96 or 128"):
        LibreYOLO(exported["onnx"], imgsz=100)
    with pytest.raises(ConfigError, match="got 80x96 images.*multiples of 32"):
        runtime.inference_forward(torch.rand(1, 3, 80, 96))


def test_a_dynamic_export_loaded_with_imgsz_predicts_at_that_size(model: LibreYOLO, exported: dict[str, Path]) -> None:
    runtime = LibreYOLO(exported["onnx"], imgsz=128)
    assert runtime.imgsz == 128
    assert_same_detections(model.predict(SAMPLE_IMAGE, imgsz=128, conf=0.01)[0].boxes.data,
                           runtime.predict(SAMPLE_IMAGE, conf=0.01)[0].boxes.data)


def test_the_onnx_graph_declares_free_batch_and_image_axes_and_carries_the_metadata(
        exported: dict[str, Path]) -> None:
    import onnx

    proto = onnx.load(str(exported["onnx"]))
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["batch", 3, "height", "width"]
    runtime = LibreYOLO(exported["onnx"])
    info = runtime.info()
    assert (info["family"], info["size"], info["task"], info["nc"], info["imgsz"]) == ("yolo9", "t", "detect", 5, IMGSZ)
    assert runtime.names == dict(enumerate(NAMES)) and info["runtime"] == "onnxruntime"


def test_a_fixed_batch_file_runs_other_batches_in_chunks(model: LibreYOLO, exported: dict[str, Path]) -> None:
    runtime = LibreYOLO(exported["torchscript"])
    images = torch.rand(3, 3, IMGSZ, IMGSZ, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert torch.allclose(runtime.inference_forward(images), model.inference_forward(images), atol=1e-4)


def test_a_fixed_size_file_refuses_another_image_size_before_reading_images(exported: dict[str, Path]) -> None:
    runtime = LibreYOLO(exported["torchscript"])
    with pytest.raises(ConfigError, match=rf"imgsz=96: .*exported for imgsz={IMGSZ} only; use imgsz={IMGSZ}, or "
                                          r"re-export from the \.pt with dynamic=True"):
        runtime.predict(SAMPLE_IMAGE, imgsz=96)
    with pytest.raises(ConfigError, match=f"exported for imgsz={IMGSZ} only"):
        runtime.val(data="shapes", imgsz=128)
    with pytest.raises(ConfigError, match=f"exported for imgsz={IMGSZ} but got 96x96 images"):
        runtime.inference_forward(torch.rand(1, 3, 96, 96))


def test_a_family_without_dynamic_image_size_exports_a_dynamic_batch_and_says_why(
        model: LibreYOLO, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    from libreyolo_models import TaskDecl

    with pytest.raises(ConfigError, match="needs dynamic_imgsz_note"):
        TaskDecl(loss_names=("x",), dynamic_imgsz=False)
    note = "its position table is built for one size"
    decl = replace(model.spec.task("detect"), dynamic_imgsz=False, dynamic_imgsz_note=note)
    monkeypatch.setattr(model, "spec", replace(model.spec, tasks={"detect": decl}))
    with caplog.at_level("WARNING", logger="libreyolo_models.export.exporter"):
        path = model.export(format="onnx", dynamic=True, file=str(tmp_path / "fixed.onnx"))
    assert f"keeps a fixed image size of {IMGSZ} (the batch is dynamic): {note}" in caplog.text
    runtime = LibreYOLO(path)
    assert runtime.info()["dynamic"] and not runtime.info()["dynamic_imgsz"]
    assert runtime.inference_forward(torch.rand(3, 3, IMGSZ, IMGSZ)).shape[0] == 3
    monkeypatch.setattr(runtime, "spec", model.spec)
    with pytest.raises(ConfigError, match=f"re-export from the .pt with imgsz=96 .*one size per file: {note}"):
        runtime.predict(SAMPLE_IMAGE, imgsz=96)


def test_metadata_of_the_first_schema_reads_as_a_fixed_size_and_a_newer_one_asks_for_an_upgrade(
        exported: dict[str, Path]) -> None:
    import json

    from libreyolo_models.export import ExportMetadata

    data = json.loads(LibreYOLO(exported["onnx"]).runtime.meta.to_json())  # type: ignore[union-attr]
    old = {key: value for key, value in data.items() if key != "dynamic_imgsz"} | {"schema": 1}
    meta = ExportMetadata.from_json(json.dumps(old), "old.onnx")
    assert meta.dynamic and not meta.dynamic_imgsz
    with pytest.raises(CheckpointError, match="new.onnx: exported with metadata schema 9, newer.*upgrade libreyolo"):
        ExportMetadata.from_json(json.dumps(data | {"schema": 9}), "new.onnx")


@pytest.mark.parametrize(("verb", "what"), [
    (lambda m: m.train(data="shapes", epochs=1), "train"),
    (lambda m: m.fuse(), "fuse"),
    (lambda m: m.half(), "cast to fp16"),
    (lambda m: m.predict(SAMPLE_IMAGE, cuda_graph=True), r"predict\(cuda_graph=True\)"),
    (lambda m: m.predict(SAMPLE_IMAGE, compile=True), "compile=True"),
    (lambda m: m.capture_graph(), "capture CUDA graphs"),
    (lambda m: m.save("x.pt"), "save a checkpoint"),
    (lambda m: m.export(format="onnx"), "export"),
])
def test_what_needs_pytorch_is_refused_naming_the_pt_way_back(verb, what: str, exported: dict[str, Path]) -> None:
    runtime = LibreYOLO(exported["onnx"])
    with pytest.raises(ConfigError, match=rf"cannot {what}.*exported onnxruntime model.*\.pt checkpoint"):
        verb(runtime)


def test_a_missing_runtime_names_its_extra(exported: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(ImportError, match=r"pip install 'libreyolo\[onnx\]'"):
        LibreYOLO(exported["onnx"])
    monkeypatch.setitem(sys.modules, "openvino", None)
    with pytest.raises(ImportError, match=r"pip install 'libreyolo\[openvino\]'"):
        LibreYOLO(exported["openvino"])


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_an_onnx_file_without_our_metadata_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "plain.onnx"
    torch.onnx.export(torch.nn.Conv2d(3, 4, 3), (torch.rand(1, 3, 8, 8),), str(path), dynamo=False)
    with pytest.raises(CheckpointError, match="without LibreYOLO metadata.*model.export"):
        LibreYOLO(path)


def test_bad_export_options_are_refused_before_any_work(model: LibreYOLO) -> None:
    with pytest.raises(ConfigError, match="format='onxx'.*did you mean 'onnx'"):
        model.export(format="onxx")
    with pytest.raises(ConfigError, match="half=True.*needs a CUDA device"):
        model.export(format="onnx", half=True)
    with pytest.raises(ConfigError, match="imgsz=70 must be a positive multiple of 32"):
        model.export(format="onnx", imgsz=70)


def test_a_family_declared_not_exportable_says_why(model: LibreYOLO, monkeypatch: pytest.MonkeyPatch) -> None:
    from libreyolo_models import TaskDecl

    with pytest.raises(ConfigError, match="needs export_note"):
        TaskDecl(loss_names=("x",), exportable=False)
    decl = replace(model.spec.task("detect"), exportable=False, export_note="its decoder loops in Python")
    monkeypatch.setattr(model, "spec", replace(model.spec, tasks={"detect": decl}))
    with pytest.raises(ConfigError, match="does not export: its decoder loops in Python"):
        model.export(format="onnx")


@pytest.mark.cuda
def test_onnx_on_the_gpu_matches_pytorch_and_half_exports(model: LibreYOLO, tmp_path: Path) -> None:
    """On a GPU: the CUDA execution provider (when onnxruntime has it) and fp16 TorchScript.

    Exports its own ONNX file, unsimplified: the GPU machine has onnx and onnxruntime but neither
    onnxslim nor OpenVINO, which the CPU fixture ``exported`` needs."""
    pytest.importorskip("onnxruntime", reason="the [onnx] extra runs ONNX files")
    runtime = LibreYOLO(model.export(format="onnx", dynamic=True, file=str(tmp_path / "g.onnx"))).to(0)
    images = torch.rand(8, 3, IMGSZ, IMGSZ, generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        expected = model.inference_forward(images)
    got = runtime.inference_forward(images.cuda())
    assert got.device.type == "cuda" and torch.allclose(got.cpu(), expected, atol=1e-3)
    gpu = LibreYOLO(family="yolo9", size="t", nc=5, imgsz=IMGSZ)
    gpu.net.load_state_dict(model.net.state_dict())
    path = gpu.to(0).eval().export(format="torchscript", half=True, device="0", file=str(tmp_path / "h.torchscript"))
    half = LibreYOLO(path).to(0)
    # Against the PyTorch model in fp16 too: this untrained head puts many near-equal boxes on the
    # image, and fp32-vs-fp16 rounding moves which of them NMS keeps (seen on the H200: 6 vs 5).
    assert_same_detections(gpu.predict(SAMPLE_IMAGE, conf=0.01, half=True)[0].boxes.data.cpu(),
                           half.predict(SAMPLE_IMAGE, conf=0.01)[0].boxes.data.cpu(), iou=0.95, score=1e-2)


def test_a_torchscript_file_runs_only_where_it_was_traced(exported: dict[str, Path]) -> None:
    runtime = LibreYOLO(exported["torchscript"])
    assert runtime.runtime is not None and runtime.runtime.meta.extra["traced_on"] == "cpu"
    runtime.runtime.meta = replace(runtime.runtime.meta, extra={"traced_on": "cuda"})  # as if traced on a GPU
    with pytest.raises(ConfigError, match=r"traced on cuda.*model\.to\(0\).*re-export from the \.pt with device=cpu"):
        runtime.predict(SAMPLE_IMAGE)


def test_a_cpu_trace_stays_on_the_cpu_when_no_device_is_asked(exported: dict[str, Path], monkeypatch) -> None:
    """predict/val default to cuda:0 when there is a GPU; a file traced on the CPU runs only there,
    so with no device given it stays on the CPU instead of failing (seen on the H200)."""
    from libreyolo_models.devices import default_device

    runtime = LibreYOLO(exported["torchscript"])
    assert runtime.runs_only_on == "cpu" and LibreYOLO(exported["onnx"]).runs_only_on is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert default_device(None, torch.device("cpu"), runtime.runs_only_on) == torch.device("cpu")
    assert default_device(None, torch.device("cpu"), None) == torch.device("cuda", 0)
    assert default_device("cpu", torch.device("cpu"), "cuda") == torch.device("cpu")


def test_cpu_runtimes_take_torchs_thread_count(exported: dict[str, Path]) -> None:
    """ONNX Runtime and OpenVINO compute on torch's intra-op thread count, as NCNN and TFLite do:
    left to themselves each starts a pool the size of the machine, so two DDP ranks or test
    workers validating an export on one CPU oversubscribe it."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        onnx = LibreYOLO(exported["onnx"]).runtime
        openvino = LibreYOLO(exported["openvino"]).runtime
    finally:
        torch.set_num_threads(before)
    assert onnx is not None and onnx._options.intra_op_num_threads == 1  # type: ignore[attr-defined]
    assert openvino is not None and openvino._compiled.get_property("INFERENCE_NUM_THREADS") == 1  # type: ignore[attr-defined]


def test_openvino_computes_in_float32_on_any_cpu(exported: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    """OpenVINO's CPU plugin would pick bf16 on a CPU with AVX512-BF16 or AMX (outputs drifting from
    ONNX's); the backend pins the precision of the export, and an explicit request is honoured where
    the CPU has bf16. Where it has not (the usual CI CPU), the plugin computes in f32 and a warning
    says so: the expectation follows the CPU, so the test holds on both kinds."""
    import logging

    import openvino as ov

    runtime = LibreYOLO(exported["openvino"]).runtime
    assert runtime is not None and runtime.describe()["inference_precision"] == "f32"
    monkeypatch.setenv("LIBREYOLO_OPENVINO_PRECISION", "bf16")
    has_bf16 = "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    with caplog.at_level(logging.WARNING, logger="libreyolo_models.runtime.backends"):
        asked = LibreYOLO(exported["openvino"]).runtime
    assert asked is not None and asked.describe()["inference_precision"] == ("bf16" if has_bf16 else "f32")
    assert ("this CPU has no native bf16" in caplog.text) is not has_bf16
    monkeypatch.setenv("LIBREYOLO_OPENVINO_PRECISION", "double")
    with pytest.raises(ConfigError, match="LIBREYOLO_OPENVINO_PRECISION='double'.*f32"):
        LibreYOLO(exported["openvino"])


def test_an_openvino_bf16_request_on_a_cpu_without_bf16_says_it_runs_in_f32(
        exported: dict[str, Path], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The plugin ignores a bf16 hint on such a CPU; the backend's warning makes that visible (the
    CPU's capabilities are simulated here, so only the warning is checked)."""
    import logging

    import openvino as ov

    class CoreWithoutBF16(ov.Core):
        def get_property(self, device: str, name: str, *args: object) -> object:  # type: ignore[override]
            value = super().get_property(device, name, *args)
            return [c for c in value if c != "BF16"] if name == "OPTIMIZATION_CAPABILITIES" else value

    monkeypatch.setattr(ov, "Core", CoreWithoutBF16)
    monkeypatch.setenv("LIBREYOLO_OPENVINO_PRECISION", "bf16")
    with caplog.at_level(logging.WARNING, logger="libreyolo_models.runtime.backends"):
        LibreYOLO(exported["openvino"])
    assert "LIBREYOLO_OPENVINO_PRECISION=bf16: this CPU has no native bf16" in caplog.text
