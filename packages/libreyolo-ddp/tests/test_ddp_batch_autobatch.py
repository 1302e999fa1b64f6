"""The global-batch rule and batch=-1 resolution (single process; the broadcast is in the torchrun tests)."""

from __future__ import annotations

import logging

import pytest
import torch

import libreyolo_ddp as ddp
from libreyolo_ddp import AutobatchError, BatchSplitError, DistEnv


def test_batch_not_divisible_names_nearest_valid_values():
    with pytest.raises(BatchSplitError) as info:
        ddp.split_global_batch(6, 4)
    assert str(info.value) == (
        "batch=6 is the global batch and must be divisible by world_size=4: each rank trains at "
        "batch // world_size, so this would silently train a different global batch than requested. "
        "Use batch=4 or batch=8."
    )


@pytest.mark.parametrize(
    ("batch", "world", "options"),
    [(30, 4, "Use batch=28 or batch=32."), (2, 4, "Use batch=4."), (7, 2, "Use batch=6 or batch=8."),
     (1, 3, "Use batch=3.")],
)
def test_only_valid_alternatives_are_offered(batch, world, options):
    with pytest.raises(BatchSplitError) as info:
        ddp.split_global_batch(batch, world)
    assert str(info.value).endswith(options)


def test_divisible_batch_splits_evenly():
    assert ddp.split_global_batch(64, 2) == 32
    assert ddp.split_global_batch(16, 1) == 16
    assert ddp.split_global_batch(8, 8) == 1


def test_split_names_where_a_resumed_batch_came_from():
    with pytest.raises(BatchSplitError) as info:
        ddp.split_global_batch(6, 4, source="checkpoint last.pt")
    assert str(info.value).endswith("Use batch=4 or batch=8. (checkpoint last.pt)")


@pytest.mark.parametrize(("batch", "fragment"), [(-1, "resolve_autobatch"), (0, "positive"), (2.0, "integer"),
                                                 (True, "integer")])
def test_unusable_batches_are_rejected_with_the_fix(batch, fragment):
    with pytest.raises(BatchSplitError, match=fragment):
        ddp.split_global_batch(batch, 2)


def test_batch_split_error_is_a_value_error():
    assert issubclass(BatchSplitError, ValueError)


def _counting(value: int) -> tuple[list[int], object]:
    calls: list[int] = []

    def probe() -> int:
        calls.append(1)
        return value
    return calls, probe


@pytest.mark.parametrize(
    ("per_gpu", "world", "nbs", "expected"),
    [
        (40, 2, 64, 64),    # 80 capped at nbs
        (13, 2, 64, 26),    # under the cap: probe x world
        (21, 4, 50, 48),    # cap 50 rounded down to a multiple of 4
        (5, 4, 2, 4),       # nbs below world size: at least one image per rank
        (7, 1, 64, 7),
    ],
)
def test_autobatch_scales_by_world_caps_at_nbs_and_rounds_to_world(per_gpu, world, nbs, expected):
    calls, probe = _counting(per_gpu)
    assert ddp.resolve_autobatch(probe, world_size=world, nbs=nbs, env=DistEnv()) == expected
    assert len(calls) == 1
    assert expected % world == 0


def test_autobatch_logs_one_line_with_the_numbers(caplog):
    _, probe = _counting(40)
    with caplog.at_level(logging.INFO, logger="libreyolo_ddp.autobatch"):
        ddp.resolve_autobatch(probe, world_size=2, nbs=64, env=DistEnv())
    lines = [r.getMessage() for r in caplog.records if r.name == "libreyolo_ddp.autobatch"]
    assert len(lines) == 1
    assert all(token in lines[0] for token in ("40", "x 2", "= 80", "nbs=64", "global batch 64", "32 per rank"))


def test_autobatch_under_torchrun_without_process_group_refuses_instead_of_probing_everywhere():
    calls, probe = _counting(8)
    with pytest.raises(AutobatchError, match="init_distributed"):
        ddp.resolve_autobatch(probe, world_size=2, nbs=64, env=DistEnv(rank=1, local_rank=1, world_size=2,
                                                                          is_torchrun=True))
    assert calls == []


@pytest.mark.parametrize("bad", [0, -3, None, 2.5])
def test_autobatch_rejects_a_probe_result_that_is_not_a_positive_integer(bad):
    with pytest.raises(AutobatchError, match="positive integer"):
        ddp.resolve_autobatch(lambda: bad, world_size=1, nbs=64, env=DistEnv())


def test_fit_batch_size_extrapolates_a_linear_memory_model():
    mib = 2**20
    samples = [(1, 1100 * mib), (2, 1200 * mib), (4, 1400 * mib)]  # 1000 MiB fixed + 100 MiB per image
    assert ddp.fit_batch_size(samples, 3000 * mib) == 20
    assert ddp.fit_batch_size(samples, 3000 * mib, ceiling=15) == 15
    assert ddp.fit_batch_size([(4, 400 * mib)], 1000 * mib) == 10  # one point: proportional
    assert ddp.fit_batch_size([(1, 5 * mib), (2, 5 * mib)], 100 * mib) == 2  # no growth: largest measured
    assert ddp.fit_batch_size(samples, 500 * mib) == 1  # never below one image
    with pytest.raises(AutobatchError):
        ddp.fit_batch_size([], 1.0)


def test_probe_on_cpu_explains_that_autobatch_needs_cuda():
    with pytest.raises(AutobatchError) as info:
        ddp.probe_batch_size(lambda b: None, "cpu")
    assert "needs a CUDA device" in str(info.value) and "batch=16" in str(info.value)


@pytest.mark.cuda
def test_probe_fits_the_memory_each_image_takes_on_the_gpu():
    device = torch.device("cuda", 0)
    per_image = 256 * 2**20

    def step(batch: int) -> None:
        block = torch.empty(batch * per_image, dtype=torch.uint8, device=device)
        block.fill_(1)
        del block

    total = torch.cuda.get_device_properties(device).total_memory
    torch.cuda.empty_cache()
    held = torch.cuda.memory_reserved(device)  # tensors other tests left alive: the fit's intercept
    best = ddp.probe_batch_size(step, device, fraction=0.3, candidates=(1, 2, 4, 8))
    expected = int((0.3 * total - held) // per_image)
    assert abs(best - expected) <= 2, (best, expected)


@pytest.mark.cuda
def test_probe_stays_below_the_first_batch_that_ran_out_of_memory():
    device = torch.device("cuda", 0)
    seen: list[int] = []

    def step(batch: int) -> None:
        seen.append(batch)
        if batch >= 16:
            raise RuntimeError("CUDA out of memory. Tried to allocate (simulated by the test)")
        block = torch.empty(batch * 64 * 2**20, dtype=torch.uint8, device=device)
        del block

    best = ddp.probe_batch_size(step, device, fraction=0.9)
    assert best == 15
    assert seen == [1, 2, 4, 8, 16]  # stopped probing at the first out-of-memory
