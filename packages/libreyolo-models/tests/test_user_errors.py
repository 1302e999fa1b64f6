"""User mistakes get one typed error that names the bad thing and the fix, before any expensive
work: devices, checkpoints that are not checkpoints, foreign weights, empty or mistyped values."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

import libreyolo_ddp
from libreyolo_models import CheckpointError, ConfigError, LibreYOLO, LibreYOLO9
from libreyolo_models.config import load_config
from libreyolo_models.tasks.detect.task import DetectTask
from libreyolo_models.train.plan import parse_train_devices
from libreyolo_models.train.resume import merge_resume_options
from libreyolo_models.train.settings import TrainConfig

NO_CUDA = not torch.cuda.is_available()


@pytest.fixture()
def no_data_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the dataset is touched: the error must come before any expensive work."""
    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("the dataset was read before the option was checked")

    monkeypatch.setattr(DetectTask, "load_data", boom)
    monkeypatch.setattr(DetectTask, "load_split", boom)


# --------------------------------------------------------------------------- devices


@pytest.mark.skipif(not NO_CUDA, reason="checks the message on a machine without CUDA")
@pytest.mark.parametrize("device", ["cuda", "cuda:7", 0, "0", "0,1", [0, 1]], ids=lambda d: f"device={d}")
def test_a_cuda_request_without_cuda_fails_before_the_data_is_read(device: object, no_data_reads: None) -> None:
    with pytest.raises(ConfigError, match=r"asks for CUDA, but torch.cuda.is_available\(\) is False.*device='cpu'"):
        LibreYOLO9(size="t").train(data="shapes", device=device, epochs=1)


@pytest.mark.skipif(not NO_CUDA, reason="checks the message on a machine without CUDA")
@pytest.mark.parametrize("device", ["cuda", "cuda:7", 0, torch.device("cuda", 1)], ids=lambda d: f"device={d}")
def test_moving_a_model_to_a_missing_gpu_is_a_config_error(device: object) -> None:
    model = LibreYOLO9(size="t")
    with pytest.raises(ConfigError, match=r"asks for CUDA.*use device='cpu'"):
        model.to(device)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"asks for CUDA"):
        model(torch.zeros(3, 32, 32), device=device)
    assert model.device.type == "cpu"


def test_mps_without_apple_gpu_is_a_config_error() -> None:
    if torch.backends.mps.is_available():
        pytest.skip("this machine has MPS")
    with pytest.raises(ConfigError, match="device='mps' asks for Apple's GPU"):
        LibreYOLO9(size="t").to("mps")


def test_an_index_past_the_visible_gpus_names_the_count(monkeypatch: pytest.MonkeyPatch,
                                                        no_data_reads: None) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ConfigError, match=r"names CUDA index 7, but only 2 device\(s\) are visible"):
        LibreYOLO9(size="t").train(data="shapes", device="cuda:7")


@pytest.mark.parametrize(("device", "kind", "indices"), [
    (None, "cpu", ()), ("auto", "cpu", ()), ("cpu", "cpu", ()), ("mps", "mps", ()), (0, "cuda", (0,)),
    ("0", "cuda", (0,)), ("cuda", "cuda", (0,)), ("cuda:1", "cuda", (1,)), ("0,1", "cuda", (0, 1)),
    ([0, 1], "cuda", (0, 1)), ((0, 1), "cuda", (0, 1)), ("cuda:0,1", "cuda", (0, 1)),
    ("cuda:0,cuda:1", "cuda", (0, 1)), (torch.device("cuda", 1), "cuda", (1,)),
], ids=lambda v: f"{v}")
def test_every_documented_device_form_is_accepted(monkeypatch: pytest.MonkeyPatch, device: object, kind: str,
                                                 indices: tuple[int, ...]) -> None:
    monkeypatch.setattr(libreyolo_ddp, "check_devices_available", lambda plan: None)  # forms, not hardware
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # "auto" resolves to the CPU
    cfg = load_config(TrainConfig, {"data": "shapes", "device": device}, "train()")
    plan = parse_train_devices(cfg.device, "train()")
    assert (plan.type, plan.indices) == (kind, indices)
    if isinstance(device, list | tuple):
        assert cfg.device == "0,1"  # saved in args.yaml and checkpoints as text: resumes as it was given


@pytest.mark.parametrize("device", ["gpu", "0,,1", "cuda:x", -1, True, 1.5])
def test_a_malformed_device_names_the_value_and_the_forms(device: object, no_data_reads: None) -> None:
    with pytest.raises(ConfigError, match=r"device=.* use one of 'auto', 'cpu', 'mps', 0"):
        LibreYOLO9(size="t").train(data="shapes", device=device)


# --------------------------------------------------------------------------- checkpoints


def test_a_text_file_named_pt_is_not_a_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "notes.pt"
    path.write_text("hello, these are notes\n")
    with pytest.raises(CheckpointError, match=r"notes.pt' is not a checkpoint: it is not a torch.save file "
                                              r"\(it starts with b'hello, t'\)"):
        LibreYOLO(path, family="yolo9")


def test_a_zero_byte_checkpoint_says_it_is_empty(tmp_path: Path) -> None:
    path = tmp_path / "empty.pt"
    path.touch()
    with pytest.raises(CheckpointError, match=r"empty.pt' is empty \(0 bytes\): a download or copy was cut short"):
        LibreYOLO(path)


def test_a_damaged_zip_checkpoint_gives_the_reason(tmp_path: Path) -> None:
    path = tmp_path / "damaged.pt"
    path.write_bytes(b"PK\x03\x04" + b"\x00" * 40)
    with pytest.raises(CheckpointError, match=r"cannot read checkpoint .*damaged.pt' \(\w+: .+\)"):
        LibreYOLO(path, family="yolo9")


@pytest.mark.parametrize("load", [lambda p: LibreYOLO9(p), lambda p: LibreYOLO(p, family="yolo9")])
def test_a_foreign_state_dict_names_the_family_and_the_missing_keys(tmp_path: Path, load) -> None:
    path = tmp_path / "resnet.pt"
    torch.save({"conv1.weight": torch.zeros(8, 3, 3, 3), "fc.weight": torch.zeros(10, 8)}, path)
    with pytest.raises(CheckpointError) as err:
        load(path)
    text = str(err.value)
    assert "these weights are not a YOLOv9 detect network" in text
    assert "keys are missing (e.g. ['backbone.conv0.conv.weight'" in text
    assert "2 of the file's 2 keys are not YOLOv9's (e.g. ['conv1.weight', 'fc.weight'])" in text


def test_a_state_dict_with_a_missing_key_names_it(tmp_path: Path) -> None:
    state = LibreYOLO9(size="t", nc=3).net.state_dict()
    del state["head.cv3.0.2.weight"]
    path = tmp_path / "partial.pt"
    torch.save(state, path)
    with pytest.raises(CheckpointError, match=r"head.cv3.0.2.weight"):
        LibreYOLO9(path)


# --------------------------------------------------------------------------- options


def test_empty_model_name_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"model='' is empty"):
        LibreYOLO("")


def test_tilde_is_expanded_in_model_paths_and_run_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from libreyolo_models.rundir import next_run_dir

    LibreYOLO9(size="t", nc=2).save(tmp_path / "m.pt")
    monkeypatch.setenv("HOME", str(tmp_path))
    model = LibreYOLO("~/m.pt")
    assert model.nc == 2
    assert model.save("~/copy.pt") == tmp_path / "copy.pt"
    assert next_run_dir("~/runs", "exp") == tmp_path / "runs" / "exp"


def test_resume_compares_command_line_strings_as_typed_values(caplog: pytest.LogCaptureFixture) -> None:
    saved = {"config": TrainConfig(data="shapes", batch=8, epochs=3, lr0=0.01).as_dict(), "epoch": 0,
             "world_size": 1, "global_batch": 8}
    with caplog.at_level(logging.INFO):
        merged = merge_resume_options(saved, {"batch": "8", "lr0": "0.01", "epochs": "5", "device": "cpu",
                                              "resume": "true"}, "command line")
    assert "differs" not in caplog.text  # "8" is the run's 8, "0.01" its 0.01
    assert merged["epochs"] == 5 and "epochs changed from 3 to 5" in caplog.text
    with caplog.at_level(logging.WARNING):
        merge_resume_options(saved, {"batch": "16"}, "command line")
    assert "batch=16 differs from the run's 8" in caplog.text
    with pytest.raises(ConfigError, match=r"unknown option 'bacth' \(did you mean 'batch'\?\)"):
        merge_resume_options(saved, {"bacth": "8"}, "command line")


@pytest.mark.parametrize(("cache", "match"), [("", "is not a cache setting"), ("rma", "did you mean 'ram'")])
def test_bad_cache_values_are_named(cache: str, match: str, no_data_reads: None) -> None:
    with pytest.raises(ConfigError, match=match):
        LibreYOLO9(size="t").train(data="shapes", cache=cache)


@pytest.mark.parametrize("family", ["yolo9", "yolox", "rtmdet", "rtdetr", "segformer"])
def test_every_family_names_itself_and_the_missing_keys_for_foreign_weights(tmp_path: Path, family: str) -> None:
    """The loading path is shared; each built-in family must reach it through its own class too."""
    from libreyolo_models import LibreRTDETR, LibreRTMDet, LibreSegFormer, LibreYOLOX
    from libreyolo_models.zoo.registry import get_family

    spec = get_family(family)
    by_class = {"yolo9": LibreYOLO9, "yolox": LibreYOLOX, "rtmdet": LibreRTMDet, "rtdetr": LibreRTDETR,
                "segformer": LibreSegFormer}[family]
    foreign = tmp_path / "resnet.pt"
    torch.save({"conv1.weight": torch.zeros(8, 3, 3, 3), "fc.weight": torch.zeros(10, 8)}, foreign)
    with pytest.raises(CheckpointError) as err:
        by_class(foreign)
    text = str(err.value)
    assert f"these weights are not a {spec.display_name} " in text and "keys are missing (e.g. [" in text
    assert f"2 of the file's 2 keys are not {spec.display_name}'s (e.g. ['conv1.weight', 'fc.weight'])" in text
    notes = tmp_path / "notes.pt"
    notes.write_text("hello, these are notes\n")
    with pytest.raises(CheckpointError, match=r"notes.pt' is not a checkpoint: it is not a torch.save file"):
        by_class(notes)
