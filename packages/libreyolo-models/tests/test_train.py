"""Training end to end on CPU (tiny data, tiny images): artifacts, callbacks, options, errors."""

from __future__ import annotations

import csv
import logging
from pathlib import Path

import pytest
import torch

from libreyolo_models import ConfigError, LibreYOLO, LibreYOLO9
from libreyolo_models.train.callbacks import EpochEnd, TrainEnd, TrainStart
from libreyolo_models.train.schedule import accumulate_steps, lr_factor

FAST = {"imgsz": 64, "batch": 8, "workers": 0, "epochs": 2, "close_mosaic": 1, "plots": True, "verbose": False}


class Recorder:
    """A module-level callback class (picklable, as multi-GPU training requires)."""

    def __init__(self) -> None:
        self.events: list[object] = []

    def __call__(self, event: object) -> None:
        self.events.append(event)


@pytest.fixture(scope="module")
def trained(mini_shapes: Path, tmp_path_factory: pytest.TempPathFactory):
    project = tmp_path_factory.mktemp("runs")
    model = LibreYOLO("LibreYOLO9t.yaml")
    recorder = Recorder()
    outcome = model.train(data=str(mini_shapes), project=str(project), callbacks=[recorder], **FAST)
    return model, outcome, recorder


def test_training_writes_the_run_folder(trained) -> None:
    _, outcome, _ = trained
    run = outcome.run_dir
    assert run.name == "exp"
    for name in ("weights/last.pt", "weights/best.pt", "results.csv", "args.yaml", "results.png"):
        assert (run / name).is_file(), name


def test_training_leaves_label_batch_and_validation_plots_that_decode(trained) -> None:
    import numpy as np
    from PIL import Image

    _, outcome, _ = trained
    run = outcome.run_dir
    # 24 images at batch 8: three batches in the first epoch, each drawn once.
    assert sorted(p.name for p in run.glob("train_batch*.jpg")) == ["train_batch0.jpg", "train_batch1.jpg",
                                                                     "train_batch2.jpg"]
    for name in ("labels.jpg", "train_batch0.jpg", "results.png", "confusion_matrix.png",
                 "confusion_matrix_normalized.png", "PR_curve.png", "F1_curve.png", "P_curve.png", "R_curve.png"):
        with Image.open(run / name) as im:
            pixels = np.asarray(im.convert("L"))
        assert pixels.size > 0 and pixels.std() > 0, name
    with Image.open(run / "train_batch0.jpg") as im:
        assert im.size == (192, 192)  # 8 tiles of 64 px on a 3 x 3 grid


def test_results_csv_has_losses_metrics_throughput_and_data_wait(trained) -> None:
    _, outcome, _ = trained
    with (outcome.run_dir / "results.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [int(float(r["epoch"])) for r in rows] == [1, 2]
    for key in ("train/box_loss", "train/cls_loss", "train/dfl_loss", "metrics/mAP50", "metrics/mAP50-95",
                "train/images_per_s", "train/data_wait_share", "lr/pg0"):
        assert key in rows[0], key
    assert 0.0 <= float(rows[0]["train/data_wait_share"]) <= 1.0
    assert float(rows[0]["train/images_per_s"]) > 0


def test_model_instance_holds_the_best_weights_and_classes(trained) -> None:
    model, outcome, _ = trained
    best = LibreYOLO(outcome.best)
    assert model.nc == 5 and model.names[0] == "circle" and model.imgsz == 64
    for (k, a), (_, b) in zip(model.net.state_dict().items(), best.net.state_dict().items()):
        assert torch.equal(a.cpu(), b), k
    ckpt = torch.load(outcome.best, weights_only=True)
    assert ckpt["is_ema_weights"] and ckpt["world_size"] == 1 and ckpt["global_batch"] == 8
    assert ckpt["model_family"] == "yolo9" and ckpt["names"][0] == "circle"


def test_val_with_fuse_gives_the_unfused_metrics(trained, mini_shapes) -> None:
    _, outcome, _ = trained
    model = LibreYOLO(outcome.best)
    plain = model.val(data=str(mini_shapes), imgsz=64, batch=4, workers=0, verbose=False)
    fused = model.val(data=str(mini_shapes), imgsz=64, batch=4, workers=0, verbose=False, fuse=True)
    assert model.fused
    assert plain.n_pred > 0 and abs(fused.n_pred - plain.n_pred) <= 0.01 * plain.n_pred
    assert abs(fused.map50 - plain.map50) < 0.02 and abs(fused.map50_95 - plain.map50_95) < 0.02


def test_callbacks_receive_frozen_events_in_order(trained) -> None:
    _, _, recorder = trained
    kinds = [type(e) for e in recorder.events]
    assert kinds == [TrainStart, EpochEnd, EpochEnd, TrainEnd]
    with pytest.raises(AttributeError):
        recorder.events[1].epoch = 9  # frozen


def test_resume_extends_epochs_and_continues_from_last(trained, caplog) -> None:
    _, outcome, _ = trained
    model = LibreYOLO(outcome.last)
    with caplog.at_level(logging.INFO):
        again = model.train(resume=True, epochs=3, lr0=0.5, data="ignored")
    assert again.run_dir == outcome.run_dir and again.epochs_run == 1
    assert "epochs changed from 2 to 3" in caplog.text
    assert "lr0=0.5 differs" in caplog.text
    with (outcome.run_dir / "results.csv").open() as fh:
        assert [int(float(r["epoch"])) for r in csv.DictReader(fh)] == [1, 2, 3]


def test_resume_of_a_finished_run_asks_for_more_epochs(trained) -> None:
    _, outcome, _ = trained
    with pytest.raises(ConfigError, match="already finished"):
        LibreYOLO(outcome.last).train(resume=True)


def test_resume_needs_a_training_checkpoint() -> None:
    with pytest.raises(ConfigError, match="resume=True needs a model loaded from a training checkpoint"):
        LibreYOLO9(size="t").train(data="shapes", resume=True)


def test_cuda_graph_on_cpu_logs_one_line_and_trains_eagerly(mini_shapes, tmp_path, caplog) -> None:
    model = LibreYOLO9(size="t")
    with caplog.at_level(logging.INFO, logger="libreyolo_models.train.graph_forward"):
        model.train(data=str(mini_shapes), project=str(tmp_path), cuda_graph=True, val=False,
                    **{**FAST, "epochs": 1})
    lines = [r.getMessage() for r in caplog.records if "cuda_graph" in r.getMessage()]
    assert len(lines) == 1 and "training eagerly" in lines[0]


def test_deterministic_training_leaves_the_process_flags_as_it_found_them(mini_shapes, tmp_path) -> None:
    before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic,
              torch.backends.cudnn.benchmark)
    seen: list[bool] = []
    LibreYOLO9(size="t").train(data=str(mini_shapes), project=str(tmp_path), deterministic=True, val=False,
                               callbacks=[lambda e: seen.append(torch.are_deterministic_algorithms_enabled())],
                               **{**FAST, "epochs": 1})
    assert seen and all(seen)  # deterministic while training ...
    after = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic,
             torch.backends.cudnn.benchmark)
    assert after == before  # ... and not after


@pytest.mark.parametrize(("options", "match"), [
    ({"batch": -1, "device": "cpu"}, "batch=-1 .* needs a CUDA device"),
    ({"epochs": 0}, "epochs=0 must be at least 1"),
    ({"bacth": 4}, "did you mean 'batch'"),
    ({"data": ""}, "train needs data="),
    ({"deterministic": True, "cudnn_benchmark": True}, "cudnn_benchmark=True contradicts deterministic=True"),
    ({"channels_last": "sometimes"}, "channels_last"),
    ({"max_grad_norm": -1.0}, r"max_grad_norm=-1.0 must be >= 0 .* 0 turns clipping off"),
    ({"batch": 1, "imgsz": 32}, r"batch=1 at imgsz=32 gives each device one image.*use batch >= 2 or imgsz >= 64"),
])
def test_bad_training_options_fail_before_any_work(options, match, mini_shapes) -> None:
    with pytest.raises(ConfigError, match=match):
        LibreYOLO9(size="t").train(**{"data": str(mini_shapes), **options})


def test_multi_gpu_request_for_a_family_without_autospawn_names_torchrun(mini_shapes, monkeypatch) -> None:
    import libreyolo_ddp

    monkeypatch.setattr(libreyolo_ddp, "check_devices_available", lambda plan: None)
    import dataclasses

    model = LibreYOLO9(size="t")
    model.spec = dataclasses.replace(model.spec, ddp_autospawn=False)
    with pytest.raises(ConfigError, match=r"torchrun --nproc_per_node=2"):
        model.train(data=str(mini_shapes), device="0,1", batch=8)


def test_lr_schedule_and_accumulation_ramp() -> None:
    assert lr_factor(0, 10, 0.01, cosine=False) == 1.0
    assert lr_factor(10, 10, 0.01, cosine=False) == pytest.approx(0.01)
    assert lr_factor(5, 10, 0.01, cosine=True) == pytest.approx(0.505)
    assert accumulate_steps(0, 100, nbs=64, batch=16) == 1
    assert accumulate_steps(100, 100, nbs=64, batch=16) == 4


def test_loss_gains_reach_the_loss(mini_shapes: Path, tmp_path: Path) -> None:
    """``box=``/``cls=``/``dfl=`` (and ``gains=``) weigh the family's terms in the loss itself."""
    from libreyolo_models import LossContext
    from libreyolo_models.layers.targets import random_box_targets

    model = LibreYOLO9(size="t", nc=3)
    images = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    targets = random_box_targets(2, 3, torch.Generator().manual_seed(1))
    outputs = model.training_forward(images)
    base = model.family.compute_loss(outputs, targets, LossContext(gains={"box": 7.5, "cls": 0.5, "dfl": 1.5}))
    doubled = model.family.compute_loss(outputs, targets, LossContext(gains={"box": 15.0, "cls": 0.5, "dfl": 0.0}))
    torch.testing.assert_close(doubled.items, base.items * torch.tensor([2.0, 1.0, 0.0]))
    # End to end: a zero gain zeroes the logged term, the others stay.
    out = LibreYOLO9(size="t").train(data=str(mini_shapes), project=str(tmp_path), box=0.0, gains={"dfl": 0.0},
                                     **{**FAST, "epochs": 1, "plots": False})
    with (out.run_dir / "results.csv").open() as fh:
        row = next(csv.DictReader(fh))
    assert float(row["train/box_loss"]) == 0.0 and float(row["train/dfl_loss"]) == 0.0
    assert float(row["train/cls_loss"]) > 0.0


def test_val_half_on_the_cpu_is_refused_before_any_work() -> None:
    model = LibreYOLO9(size="t", nc=3)
    with pytest.raises(ConfigError, match=r"val\(half=True\) runs fp16 weights, which needs a CUDA GPU.*device=0"):
        model.val(data="no-such-dataset.yaml", half=True)
    assert model.dtype == torch.float32


def test_a_family_training_head_gets_the_targets_after_the_seam(mini_shapes: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Split capture's wiring: a family that declares ``training_head`` receives the seam's outputs
    and the batch's targets in every step, and its return value is what the loss reads."""
    from libreyolo_models.families.yolo9.family import Yolo9Family

    calls: list[tuple[int, int]] = []

    def head(self, net, outputs, targets):  # noqa: ANN001, ANN202
        calls.append((len(outputs), targets.shape[1]))
        return outputs

    monkeypatch.setattr(Yolo9Family, "training_head", head, raising=False)
    LibreYOLO9(size="t").train(data=str(mini_shapes), project=str(tmp_path), **{**FAST, "epochs": 1})
    assert calls and all(c == (3, 6) for c in calls)  # three raw maps, [M, 6] detection targets


@pytest.mark.parametrize(("max_grad_norm", "scale"), [(0.0, 1.0), (1.0, None)])
def test_max_grad_norm_zero_steps_on_the_whole_gradient(max_grad_norm: float, scale: float | None) -> None:
    """0 turns clipping off (a norm-0 clip would zero every gradient); a positive value clips."""
    from libreyolo_models.contract.family import LossContext
    from libreyolo_models.train.step import StepTimer, TrainStep

    net = torch.nn.Linear(3, 1, bias=False)
    with torch.no_grad():
        net.weight.zero_()
    opt = torch.optim.SGD(net.parameters(), lr=1.0)
    step = TrainStep(None, net, net, opt, torch.amp.GradScaler("cuda", enabled=False), None,  # type: ignore[arg-type]
                     amp=False, device=torch.device("cpu"), context=LossContext(), max_grad_norm=max_grad_norm,
                     timer=StepTimer(False, torch.device("cpu")))
    (net(torch.tensor([[30.0, 40.0, 0.0]])).sum() * -1).backward()  # gradient (-30, -40, 0): norm 50
    step.optimizer_step()
    expected = torch.tensor([[30.0, 40.0, 0.0]]) * (scale if scale is not None else 1 / 50)
    torch.testing.assert_close(net.weight.detach(), expected)


def test_cudnn_autotuning_is_left_off_for_runs_too_short_to_repay_its_search() -> None:
    from libreyolo_models.train.backend_flags import AUTOTUNE_MIN_STEPS, autotune_pays

    assert not autotune_pays(390, multi_scale=False)  # the shapes quick start: 30 epochs of 13 batches
    assert autotune_pays(3_700, multi_scale=False)   # one COCO epoch at batch 32
    assert autotune_pays(AUTOTUNE_MIN_STEPS, multi_scale=False)
    assert not autotune_pays(10**6, multi_scale=True)  # every new input size would search again
