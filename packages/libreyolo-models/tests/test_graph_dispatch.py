"""CUDA-graph dispatch rules in the zoo, on CPU: refusals, messages, and every invalidation rule."""

from __future__ import annotations

import dataclasses
import logging

import pytest
import torch

from libreyolo_models import SAMPLE_IMAGE, ConfigError, LibreYOLO, LibreYOLO9
from libreyolo_models.train.graph_forward import graph_forward, wants_graphs
from libreyolo_models.train.settings import TrainConfig


def declare_capture(model: LibreYOLO, *, inference: bool, training: bool) -> LibreYOLO:
    """The model with its task's capture declarations replaced (the family's own stay untouched)."""
    decl = dataclasses.replace(model.spec.task(model.task), inference_capture=inference, train_capture=training)
    model.spec = dataclasses.replace(model.spec, tasks={model.task: decl})
    return model


class SpyGraphs:
    """Stands in for the model's graph runner holder and records what the model tells it."""

    def __init__(self) -> None:
        self.invalidated: list[str] = []
        self.released = 0
        self.mode = "on"

    def invalidate(self, reason: str) -> None:
        self.invalidated.append(reason)

    def release(self) -> None:
        self.released += 1


def test_yolo9_declares_what_its_parity_matrix_row_certified() -> None:
    decl = LibreYOLO9(size="t", imgsz=64).spec.task("detect")
    assert decl.inference_capture and decl.train_capture


@pytest.mark.parametrize("request_", [True, "auto"])
def test_unverified_family_refuses_predict_with_graphs_naming_itself(request_) -> None:
    model = declare_capture(LibreYOLO9(size="t", imgsz=64), inference=False, training=False)
    with pytest.raises(NotImplementedError, match=r"YOLOv9 \(yolo9, detect\) is not verified for CUDA graph inference"):
        model(SAMPLE_IMAGE, cuda_graph=request_)
    with pytest.raises(NotImplementedError, match="yolo9"):
        model.capture_graph()


def test_cpu_model_gets_a_clear_error() -> None:
    model = LibreYOLO9(size="t", imgsz=64)
    with pytest.raises(ConfigError, match="needs the model on a CUDA GPU, but it is on cpu"):
        model(SAMPLE_IMAGE, cuda_graph=True)
    info = model.graph_info()
    assert info["supported"] is False and info["family_verified"] is True and info["graphs"] == []


def test_bad_cuda_graph_value_is_rejected() -> None:
    with pytest.raises(ConfigError, match="cuda_graph"):
        LibreYOLO9(size="t", imgsz=64)(SAMPLE_IMAGE, cuda_graph="sometimes")


def test_half_float_and_new_weights_invalidate_graphs(tmp_path) -> None:
    model = LibreYOLO9(size="t", nc=2, imgsz=64)
    path = model.save(tmp_path / "w.pt")
    spy = SpyGraphs()
    model.graphs.inference = spy
    model.half()
    model.half()  # already fp16: nothing changed, nothing dropped
    model.float()
    assert spy.invalidated == ["weights cast to float16", "weights cast to float32"]
    model.load(path)
    assert spy.invalidated[-1].startswith("new weights loaded from")
    assert spy.released == 1 and model.graphs.inference is None  # the rebuilt network gets a fresh runner


def test_device_change_invalidates_and_same_device_does_not(monkeypatch) -> None:
    model = LibreYOLO9(size="t", imgsz=64)
    spy = SpyGraphs()
    model.graphs.inference = spy
    model.to("cpu")
    assert spy.invalidated == []
    moved = []
    monkeypatch.setattr("libreyolo_models.handle.resolve_device", lambda d: torch.device("meta"))
    monkeypatch.setattr(model.net, "to", lambda device: moved.append(device))
    model.to("cuda:1")
    assert spy.invalidated == ["device change cpu -> meta"] and moved == [torch.device("meta")]


def test_class_change_before_training_releases_graphs() -> None:
    """Training's class adaptation builds a new handle (the job never touches the facade's); the
    facade, taking it over, invalidates and frees the old graphs."""
    from libreyolo_models.train.adapt import adapt_to_classes

    model = LibreYOLO9(size="t", imgsz=64)
    spy = SpyGraphs()
    model.graphs.inference = spy
    old = model.handle
    adapted = adapt_to_classes(old, 3, {0: "a", 1: "b", 2: "c"})
    assert adapted is not old and adapted.nc == 3 and old.nc == 80 and spy.invalidated == []
    assert adapted.graphs.inference is None  # a fresh graph owner
    model.rebuild(nc=3)
    assert spy.invalidated == ["network rebuilt"] and spy.released == 1 and model.graphs.inference is None


def test_invalidate_cuda_graph_reaches_the_training_graphs() -> None:
    model = LibreYOLO9(size="t", imgsz=64)
    spy = SpyGraphs()
    model.graphs.training = spy
    model.invalidate_cuda_graph("head branch switched on")
    assert spy.invalidated == ["head branch switched on"]


@pytest.mark.parametrize(("device", "verified_flag", "reason"), [
    ("cuda:0", False, "not verified for training capture"),
    ("cpu", True, "training runs on cpu"),
])
def test_train_graph_refusals_log_one_line_and_stay_eager(caplog, device, verified_flag, reason) -> None:
    model = declare_capture(LibreYOLO9(size="t", imgsz=64), inference=True, training=verified_flag)
    cfg = TrainConfig(data="shapes", cuda_graph=True)
    with caplog.at_level(logging.INFO, logger="libreyolo_models.train.graph_forward"):
        assert wants_graphs(model, cfg, device=torch.device(device)) is False
    assert len(caplog.records) == 1
    line = caplog.records[0].getMessage()
    assert line.startswith("cuda_graph=True ignored:") and reason in line and line.endswith("training eagerly")


def test_graphs_under_several_ranks_vote_on_every_decision(caplog) -> None:
    import libreyolo_ddp

    model = LibreYOLO9(size="t", imgsz=64)
    cfg = TrainConfig(data="shapes", cuda_graph=True)
    assert wants_graphs(model, cfg, device=torch.device("cuda:0"))  # yolo9 is verified; no GPU needed to ask
    with caplog.at_level(logging.INFO, logger="libreyolo_models.train.graph_forward"):
        graphed = graph_forward(model, model.training_module(), cfg, world_size=2)
    assert graphed._agree is libreyolo_ddp.agree_min and model.graphs.training is graphed
    assert "2 ranks decide together" in caplog.records[-1].getMessage()


def test_capture_ahead_records_the_input_predict_hands_over(monkeypatch) -> None:
    """A graph is keyed by its input's dtype and strides: capturing ahead must use predict's own
    (a detector's uint8 letterbox, a channels-first view), or predict would capture again."""
    from libreyolo_cudagraph import GraphRunner
    from libreyolo_models import graphs
    from libreyolo_models.data.letterbox_images import letterbox_pixels

    seen: list[torch.Tensor] = []
    monkeypatch.setattr(graphs, "check_graph_support", lambda model, what: None)
    monkeypatch.setattr(GraphRunner, "capture", lambda self, x: seen.append(x))
    LibreYOLO9(size="t", imgsz=64).capture_graph(batch=2)
    expected, _ = letterbox_pixels([torch.zeros(40, 50, 3, dtype=torch.uint8)] * 2, 64)
    (x,) = seen
    assert (x.shape, x.dtype, x.stride()) == (expected.shape, expected.dtype, expected.stride())
