"""StorageWatch: every way parameters and buffers can move is seen; in-place updates are not."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import libreyolo_cudagraph.storage as storage
from libreyolo_cudagraph.storage import StorageWatch


def net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Linear(4, 2))


def test_in_place_updates_are_not_a_change_and_skip_the_full_walk(monkeypatch):
    model = net()
    watch = StorageWatch(model)
    walks = []
    real = storage.storage_fingerprint
    monkeypatch.setattr(storage, "storage_fingerprint", lambda m: walks.append(1) or real(m))
    with torch.no_grad():
        model[0].weight.mul_(2)
        model[1].running_mean.add_(1)
    for _ in range(3):
        assert watch.changed() is None
    assert walks == []  # the cheap path answered


def test_moving_to_another_dtype_is_reported_once():
    model = net()
    watch = StorageWatch(model)
    model.double()
    change = watch.changed()
    assert change is not None and "'0.weight'" in change and "torch.float64" in change
    assert watch.changed() is None


@pytest.mark.parametrize(
    "surgery",
    [
        pytest.param(
            lambda m: m.load_state_dict({k: v.clone() for k, v in m.state_dict().items()}, assign=True),
            id="assign",
        ),
        pytest.param(lambda m: m.__setitem__(2, nn.Linear(4, 2)), id="new-submodule"),
        pytest.param(lambda m: setattr(m[0].weight, "data", m[0].weight.data.clone()), id="data-swap"),
        pytest.param(
            lambda m: m[1]._buffers.__setitem__("running_var", torch.ones(4)), id="buffer-dict-bypass"
        ),
        pytest.param(lambda m: delattr(m[0], "bias"), id="deleted-parameter"),
    ],
)
def test_every_kind_of_move_or_replacement_is_seen(surgery):
    model = net()
    watch = StorageWatch(model)
    with torch.no_grad():
        surgery(model)
    assert watch.changed() is not None


def test_overwriting_conversion_future_flag_is_seen():
    model = net()
    watch = StorageWatch(model)
    saved = torch.__future__.get_overwrite_module_params_on_conversion()
    torch.__future__.set_overwrite_module_params_on_conversion(True)
    try:
        model.double()
    finally:
        torch.__future__.set_overwrite_module_params_on_conversion(saved)
    assert watch.changed() is not None


def test_lazy_parameters_are_watched_until_they_materialise():
    model = nn.Sequential(nn.LazyLinear(3))
    watch = StorageWatch(model)
    assert watch.changed() is None
    model(torch.rand(2, 5))
    assert "moved or were replaced" in watch.changed()  # materialised: storage appeared
    assert watch.changed() is None and not watch._has_lazy


def test_trainable_flags_follow_freezing():
    model = net()
    watch = StorageWatch(model)
    assert all(watch.trainable()) and len(watch.trainable()) == 6
    model[0].requires_grad_(False)
    assert watch.trainable() == (False, False, True, True, True, True)
