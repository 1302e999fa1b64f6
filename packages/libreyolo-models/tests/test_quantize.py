"""``quantize`` / ``dequantize`` on CPU: graphs dropped with the reason, predict after quantize,
exact restore, the int8 refusal naming the family, a device that cannot run a recipe, export
carrying the precision. The graphed half (recapture equals quantized eager) is marked ``cuda``."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

from libreyolo_models import SAMPLE_IMAGE, ConfigError, LibreYOLO, LibreYOLO9
from libreyolo_models.export.exporter import export_precision
from libreyolo_models.export.settings import ExportConfig
from libreyolo_models.layers.quantized import Int8Linear, linear_share, quantize_linears, restore_linears


class SpyRunner:
    """Stands in for a captured inference runner and records the invalidations it is told of."""

    def __init__(self) -> None:
        self.invalidated: list[str] = []

    def invalidate(self, reason: str) -> None:
        self.invalidated.append(reason)

    def release(self) -> None:
        pass


def weights(model: LibreYOLO) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.net.state_dict().items()}


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def segformer() -> LibreYOLO:
    return LibreYOLO(family="segformer", size="b0", imgsz=64)


@pytest.mark.parametrize("recipe,dtype", [("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_quantize_casts_drops_graphs_with_the_reason_predicts_and_dequantize_restores(recipe, dtype, caplog) -> None:
    model = LibreYOLO9(size="t", imgsz=64)
    before = weights(model)
    spy = SpyRunner()
    model.graphs.inference = spy
    with caplog.at_level(logging.INFO, logger="libreyolo_models"):
        model.quantize(recipe)
    assert model.dtype == dtype and model.info()["quantized"] == recipe
    assert spy.invalidated == [f"quantize({recipe!r})"]
    assert model.graphs.last_invalidation == f"quantize({recipe!r})"
    assert f"CUDA graphs invalidated (1 runner(s) held): quantize({recipe!r})" in caplog.text
    results = model(SAMPLE_IMAGE, imgsz=64, conf=0.0, max_det=5)
    assert len(results) == 1 and results[0].boxes is not None
    model.dequantize()
    assert spy.invalidated[-1] == f"dequantize() from {recipe!r}"
    assert model.dtype == torch.float32 and model.info()["quantized"] is None
    assert same(weights(model), before)  # bit for bit, not a cast back


def test_a_quantized_model_validates_on_fp32_batches(mini_shapes) -> None:
    model = LibreYOLO9(size="t", imgsz=64, nc=5).quantize("bf16")
    metrics = model.val(data=str(mini_shapes), imgsz=64, workers=0, verbose=False, plots=False)
    assert 0.0 <= metrics.map50 <= 1.0 and model.dtype == torch.bfloat16


def test_int8_is_refused_for_a_convolutional_family_by_name() -> None:
    model = LibreYOLO9(size="t", imgsz=64)
    with pytest.raises(ConfigError, match=r"YOLOv9 \(yolo9\) keeps 0% of its parameters in linear layers"):
        model.quantize("int8")
    assert model.info()["quantized"] is None


def test_int8_quantizes_the_linear_layers_of_a_linear_heavy_family(segformer) -> None:
    before = weights(segformer)
    expected = segformer(SAMPLE_IMAGE, imgsz=64)[0].masks.data
    segformer.quantize("int8")
    try:
        assert sum(isinstance(m, Int8Linear) for m in segformer.net.modules()) > 0
        assert not any(type(m) is nn.Linear for m in segformer.net.modules())
        got = segformer(SAMPLE_IMAGE, imgsz=64)[0].masks.data
        assert got.shape == expected.shape
        assert (got == expected).float().mean() > 0.9  # int8 weights change few pixels' class
        with pytest.raises(ConfigError, match="save a checkpoint of a model quantized to 'int8'"):
            segformer.save("never.pt")
    finally:
        segformer.dequantize()
    assert same(weights(segformer), before)


def test_a_recipe_the_device_cannot_run_is_refused_and_the_weights_come_back(monkeypatch) -> None:
    model = LibreYOLO9(size="t", imgsz=64)
    before = weights(model)

    def no_half_kernel(net, images):
        raise RuntimeError('"slow_conv2d_cpu" not implemented for \'Half\'')

    monkeypatch.setattr(model.family, "inference_forward", no_half_kernel)
    with pytest.raises(ConfigError, match=r"cannot run fp16 inference on cpu .*slow_conv2d_cpu.*quantize on a GPU"):
        model.quantize("fp16")
    assert model.dtype == torch.float32 and model.info()["quantized"] is None
    assert same(weights(model), before)


def test_a_quantized_model_refuses_training_saving_and_casts_naming_dequantize(tmp_path) -> None:
    model = LibreYOLO9(size="t", imgsz=64).quantize("bf16")
    with pytest.raises(ConfigError, match=r"quantized \('bf16'\) for inference; call model.dequantize\(\)"):
        model.train(data="shapes", epochs=1)
    with pytest.raises(ConfigError, match="dequantize"):
        model.save(tmp_path / "q.pt")
    with pytest.raises(ConfigError, match="dequantize"):
        model.float()
    with pytest.raises(ConfigError, match="dequantize"):
        model(SAMPLE_IMAGE, imgsz=64, half=True)
    with pytest.raises(ConfigError, match=r"quantized to 'bf16'; call model.dequantize\(\) first, then quantize"):
        model.quantize("fp16")
    model.quantize("bf16")  # the same recipe again: nothing to do
    with pytest.raises(ConfigError, match=r"unknown recipe.*did you mean 'fp16'"):
        model.dequantize().quantize("fp61")


def test_export_carries_the_precision(tmp_path) -> None:
    model = LibreYOLO9(size="t", imgsz=64).quantize("bf16")
    with pytest.raises(ConfigError, match="only TorchScript carries here"):
        model.export(format="onnx", file=str(tmp_path / "m.onnx"))
    path = model.export(format="torchscript", file=str(tmp_path / "m.torchscript"))
    exported = LibreYOLO(str(path))
    assert exported.info()["precision"] == "bf16"
    ours = model(SAMPLE_IMAGE, imgsz=64, conf=0.0, max_det=5)[0].boxes.data
    theirs = exported(SAMPLE_IMAGE, imgsz=64, conf=0.0, max_det=5)[0].boxes.data
    assert torch.equal(ours, theirs)
    plain = LibreYOLO9(size="t", imgsz=64).handle
    assert export_precision(plain, ExportConfig(format="onnx")) == ("fp32", False)
    assert export_precision(plain, ExportConfig(format="onnx", half=True)) == ("fp16", True)


def test_int8_export_records_its_precision(segformer, tmp_path) -> None:
    segformer.quantize("int8")
    try:
        path = segformer.export(format="torchscript", file=str(tmp_path / "s.torchscript"))
    finally:
        segformer.dequantize()
    assert LibreYOLO(str(path)).info()["precision"] == "int8"


def test_int8_linear_is_within_half_a_step_of_the_weights_and_shared_layers_stay_shared() -> None:
    torch.manual_seed(0)
    shared = nn.Linear(8, 4)
    net = nn.Sequential(shared, nn.ReLU(), nn.Linear(4, 8), shared if False else nn.Identity())
    net.add_module("again", shared)  # the same layer under a second name
    net.add_module("attn", nn.MultiheadAttention(8, 2))
    assert 0.0 < linear_share(net) < 1.0  # attention's own projections do not count
    names = quantize_linears(net)
    assert set(names) == {"0", "2", "again"} and net[0] is net.again
    q = net[0]
    assert isinstance(q, Int8Linear)
    step = q.weight_scale / 2
    assert ((q.dequantized(torch.float32) - shared.weight).abs() <= step + 1e-7).all()
    x = torch.rand(3, 8)
    assert torch.allclose(q(x), shared(x), atol=0.05)
    assert set(restore_linears(net)) == {"0", "2", "again"} and type(net[0]) is nn.Linear and net[0] is net.again


@pytest.mark.cuda
@pytest.mark.parametrize("recipe", ["fp16", "bf16"])
def test_graphed_predict_after_quantize_recaptures_and_equals_quantized_eager(recipe) -> None:
    model = LibreYOLO9(size="t", imgsz=64, device=0)
    model(SAMPLE_IMAGE, imgsz=64, cuda_graph=True)  # a graph of the fp32 network
    model.quantize(recipe)
    assert model.graph_info()["graphs"] == [] and model.graph_info()["last_invalidation"] == f"quantize({recipe!r})"
    eager = model(SAMPLE_IMAGE, imgsz=64, conf=0.0, max_det=20)[0].boxes.data
    graphed = model(SAMPLE_IMAGE, imgsz=64, conf=0.0, max_det=20, cuda_graph=True)[0].boxes.data
    info = model.graph_info()
    assert len(info["graphs"]) == 1 and info["graphs"][0]["replays"] >= 1  # recaptured for the quantized network
    assert torch.equal(eager, graphed)


@pytest.mark.cuda
def test_graphed_predict_of_an_int8_model_equals_its_eager_predict() -> None:
    model = LibreYOLO(family="segformer", size="b0", imgsz=64, device=0).quantize("int8")
    eager = model(SAMPLE_IMAGE, imgsz=64)[0].masks.data
    graphed = model(SAMPLE_IMAGE, imgsz=64, cuda_graph=True)[0].masks.data
    assert model.graph_info()["graphs"] and torch.equal(eager, graphed)
