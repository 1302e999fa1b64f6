"""SyncBatchNorm conversion rules and the warning (one process; the 1-vs-2-rank equality is in the torchrun tests)."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

import libreyolo_ddp as ddp
from libreyolo_ddp import PortableSyncBatchNorm


def _net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.BatchNorm1d(4 * 4 * 4))


def test_nothing_is_converted_in_one_process_even_when_enabled():
    model = _net()
    out = ddp.convert_sync_batchnorm(model, enabled=True, world_size=1, per_rank_batch=2)
    assert out is model
    assert not any(isinstance(m, (nn.SyncBatchNorm, PortableSyncBatchNorm)) for m in out.modules())


def test_cpu_model_gets_portable_layers_that_share_parameters_and_keep_state_dict_keys():
    model = _net()
    keys = list(model.state_dict())
    weight = model[1].weight
    out = ddp.convert_sync_batchnorm(model, enabled=True, world_size=2, per_rank_batch=8)
    assert isinstance(out[1], PortableSyncBatchNorm) and isinstance(out[4], PortableSyncBatchNorm)
    assert out[1].weight is weight  # an optimizer built earlier still updates it
    assert list(out.state_dict()) == keys
    back = ddp.revert_sync_batchnorm(out)
    assert type(back[1]) is nn.BatchNorm2d and type(back[4]) is nn.BatchNorm1d
    assert back[1].weight is weight


def test_a_lone_batchnorm_module_is_replaced_and_returned():
    out = ddp.convert_sync_batchnorm(nn.BatchNorm2d(3), enabled=True, world_size=2, per_rank_batch=4)
    assert isinstance(out, PortableSyncBatchNorm)


@pytest.mark.parametrize("train", [True, False])
def test_portable_layer_without_a_process_group_equals_plain_batchnorm(train):
    torch.manual_seed(0)
    plain = nn.BatchNorm2d(3)
    portable = ddp.convert_sync_batchnorm(nn.BatchNorm2d(3), enabled=True, world_size=2, per_rank_batch=4)
    portable.load_state_dict(plain.state_dict())
    plain.train(train)
    portable.train(train)
    x = torch.randn(4, 3, 5, 5)
    assert torch.equal(plain(x), portable(x))
    assert torch.equal(plain.running_mean, portable.running_mean)


def test_small_per_rank_batch_without_sync_warns_with_the_numbers(caplog, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    with caplog.at_level(logging.WARNING, logger="libreyolo_ddp.syncbn"):
        out = ddp.convert_sync_batchnorm(_net(), enabled=False, world_size=2, per_rank_batch=8)
    assert not any(isinstance(m, PortableSyncBatchNorm) for m in out.modules())
    [record] = [r for r in caplog.records if r.name == "libreyolo_ddp.syncbn"]
    text = record.getMessage()
    assert "sync_bn is off" in text and "2 BatchNorm layer(s)" in text
    assert "own 8 images, not the global 16" in text and "sync_bn=True" in text


@pytest.mark.parametrize(
    ("model", "world", "per_rank"),
    [(_net(), 2, 16), (nn.Sequential(nn.Linear(2, 2)), 2, 2), (_net(), 1, 2)],
)
def test_no_warning_when_batch_is_large_model_has_no_batchnorm_or_one_process(caplog, model, world, per_rank):
    with caplog.at_level(logging.WARNING, logger="libreyolo_ddp.syncbn"):
        ddp.convert_sync_batchnorm(model, enabled=False, world_size=world, per_rank_batch=per_rank)
    assert not [r for r in caplog.records if r.name == "libreyolo_ddp.syncbn"]


def test_count_batchnorm_counts_plain_and_synchronized_layers():
    model = _net()
    assert ddp.count_batchnorm(model) == 2
    assert ddp.count_batchnorm(ddp.convert_sync_batchnorm(model, enabled=True, world_size=2, per_rank_batch=1)) == 2
