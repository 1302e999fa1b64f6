"""Device parsing, CUDA_VISIBLE_DEVICES translation and backend choice (no GPU needed)."""

from __future__ import annotations

import pytest
import torch

import libreyolo_ddp as ddp
from libreyolo_ddp import DeviceError, DevicePlan, parse_devices


@pytest.mark.parametrize(
    ("value", "kind", "indices"),
    [
        ("0,1", "cuda", (0, 1)),
        ("0, 1", "cuda", (0, 1)),
        ([0, 1], "cuda", (0, 1)),
        ((2, 3), "cuda", (2, 3)),
        (["0", "cuda:1"], "cuda", (0, 1)),
        (0, "cuda", (0,)),
        (3, "cuda", (3,)),
        ("0", "cuda", (0,)),
        ("cuda", "cuda", (0,)),
        ("cuda:0", "cuda", (0,)),
        ("CUDA:1", "cuda", (1,)),
        ("cuda:0,1", "cuda", (0, 1)),
        ("cuda:0,cuda:1", "cuda", (0, 1)),
        ("cpu", "cpu", ()),
        (" CPU ", "cpu", ()),
        ("mps", "mps", ()),
        (torch.device("cuda", 1), "cuda", (1,)),
        (torch.device("cpu"), "cpu", ()),
    ],
)
def test_parse_devices_accepts_every_documented_form(value, kind, indices):
    plan = parse_devices(value)
    assert (plan.type, plan.indices) == (kind, indices)


@pytest.mark.parametrize("value", ["auto", None, ""])
def test_auto_picks_one_device_of_the_best_available_type(value):
    plan = parse_devices(value)
    expected = "cuda" if torch.cuda.is_available() else ("mps" if torch.backends.mps.is_available() else "cpu")
    assert plan.type == expected
    assert not plan.is_distributed  # several GPUs are always asked for explicitly


def test_only_two_or_more_cuda_indices_make_a_distributed_plan():
    assert parse_devices("0,1").is_distributed
    assert parse_devices("0,1").world_size == 2
    for single in ("0", "cuda:1", "cpu", "mps"):
        assert not parse_devices(single).is_distributed
        assert parse_devices(single).world_size == 1


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("gpu0", "'gpu0'"),
        ("0,,1", "empty entry"),
        ("0,", "empty entry"),
        ("0,0", "repeats"),
        ([1, 1], "repeats"),
        ("-1", "'-1'"),
        (-1, "negative index -1"),
        ("cuda:x", "'x'"),
        ("tpu", "'tpu'"),
        ("cpu,0", "'cpu'"),
        ([], "names no device"),
        (True, "boolean"),
        ([0, True], "boolean"),
        (1.5, "float"),
    ],
)
def test_bad_device_values_name_the_value_and_the_accepted_forms(value, fragment):
    with pytest.raises(DeviceError) as info:
        parse_devices(value)
    message = str(info.value)
    assert f"device={value!r}" in message
    assert fragment in message
    assert "'0,1'" in message and "'cpu'" in message  # the fix: what to write instead


def test_device_error_is_a_value_error():
    with pytest.raises(ValueError):
        parse_devices("nope")


def test_cpu_workers_plan_runs_several_gloo_ranks():
    plan = DevicePlan.cpu_workers(2)
    assert plan.type == "cpu" and plan.world_size == 2 and plan.is_distributed
    assert DevicePlan.cpu_workers(1) == DevicePlan("cpu")
    with pytest.raises(DeviceError, match="positive"):
        DevicePlan.cpu_workers(0)


def test_torch_device_numbers_ranks_as_this_process_sees_them():
    plan = parse_devices("2,3")
    assert plan.torch_device(0) == torch.device("cuda", 2)
    assert plan.torch_device(1) == torch.device("cuda", 3)
    assert parse_devices("cpu").torch_device() == torch.device("cpu")
    with pytest.raises(DeviceError, match="rank=2"):
        plan.torch_device(2)


def test_plan_rejects_inconsistent_fields():
    with pytest.raises(DeviceError, match="at least one"):
        DevicePlan("cuda", ())
    with pytest.raises(DeviceError, match="repeat"):
        DevicePlan("cuda", (0, 0))
    with pytest.raises(DeviceError, match="'tpu'"):
        DevicePlan("tpu")  # type: ignore[arg-type]


def test_plan_prints_compactly_for_logs():
    assert str(parse_devices("0,1")) == "cuda:0,1"
    assert str(DevicePlan.cpu_workers(3)) == "cpu x3"
    assert str(parse_devices("cpu")) == "cpu"


def test_visible_devices_translation_maps_plan_indices_through_user_setting():
    assert ddp.translate_visible_devices((0, 1), "4,5,6,7") == "4,5"
    assert ddp.translate_visible_devices((1, 3), "4,5,6,7") == "5,7"
    assert ddp.translate_visible_devices((0, 1), None) == "0,1"
    assert ddp.translate_visible_devices((2,), None) == "2"
    assert ddp.translate_visible_devices((1, 0), " 6, 2 ") == "2,6"
    assert ddp.translate_visible_devices((0, 1), "GPU-aaa,GPU-bbb") == "GPU-aaa,GPU-bbb"


def test_visible_devices_translation_rejects_index_past_the_list():
    with pytest.raises(DeviceError) as info:
        ddp.translate_visible_devices((0, 2), "4,5")
    assert "index 2" in str(info.value) and "CUDA_VISIBLE_DEVICES='4,5'" in str(info.value)
    assert "0..1" in str(info.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_cuda_plan_on_a_machine_without_cuda_fails_early_with_the_fix():
    with pytest.raises(DeviceError) as info:
        ddp.check_devices_available(parse_devices("0,1"))
    assert "device='cuda:0,1'" in str(info.value) and "device='cpu'" in str(info.value)


def test_cpu_plans_are_always_available():
    ddp.check_devices_available(parse_devices("cpu"))
    ddp.check_devices_available(DevicePlan.cpu_workers(2))


def test_backend_is_gloo_for_cpu_plans_and_nccl_only_with_cuda_and_nccl():
    assert ddp.choose_backend("cpu") == "gloo"
    assert ddp.choose_backend("mps") == "gloo"
    has_nccl = torch.cuda.is_available() and torch.distributed.is_nccl_available()
    assert ddp.choose_backend("cuda") == ("nccl" if has_nccl else "gloo")
    assert ddp.choose_backend() == ("nccl" if has_nccl else "gloo")


def test_local_device_follows_the_type_spawn_recorded(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LIBREYOLO_DDP_DEVICE_TYPE", "cpu")
    assert ddp.local_device() == torch.device("cpu")
    assert ddp.local_device("cuda") == torch.device("cuda", 1)
    monkeypatch.setenv("LIBREYOLO_DDP_DEVICE_TYPE", "cuda")
    assert ddp.local_device() == torch.device("cuda", 1)
