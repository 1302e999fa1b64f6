"""Per-rank seeds, rank-zero helpers and collectives outside a process group (one process)."""

from __future__ import annotations

import logging
import random

import pytest
import torch

import libreyolo_ddp as ddp


@pytest.fixture
def rank_one(monkeypatch):
    for name in ("TORCHELASTIC_RUN_ID", "LIBREYOLO_DDP_SPAWNED_BY", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")


def test_per_rank_seeds_are_distinct_deterministic_and_keep_rank_zero():
    seeds = [ddp.seed_for_rank(42, r) for r in range(64)]
    assert len(set(seeds)) == 64
    assert seeds == [ddp.seed_for_rank(42, r) for r in range(64)]
    assert seeds[0] == 42
    assert all(0 <= s < 2**32 for s in seeds)
    assert ddp.seed_for_rank(0, 1) != ddp.seed_for_rank(1, 0)


@pytest.mark.parametrize(("seed", "rank"), [(1.5, 0), ("1", 0), (0, -1), (0, True)])
def test_seed_for_rank_rejects_non_integers(seed, rank):
    with pytest.raises(ValueError):
        ddp.seed_for_rank(seed, rank)


def test_seed_everything_reproduces_draws_per_rank_and_differs_between_ranks():
    np = pytest.importorskip("numpy")

    def draws(rank: int) -> tuple:
        used = ddp.seed_everything(7, rank=rank)
        return used, random.random(), torch.rand(2).tolist(), float(np.random.rand())

    first, again, other = draws(0), draws(0), draws(1)
    assert first == again
    assert first[0] == 7 and other[0] == ddp.seed_for_rank(7, 1)
    assert all(a != b for a, b in zip(first[1:], other[1:]))


def test_collectives_without_a_process_group_are_identities():
    source = torch.tensor([1.0, 2.0], requires_grad=True)
    total = ddp.all_reduce_sum(source)
    assert torch.equal(total, source.detach()) and total is not source and not total.requires_grad
    assert torch.equal(ddp.all_reduce_mean(torch.tensor([3, 5])), torch.tensor([3.0, 5.0]))
    assert torch.equal(ddp.all_reduce_max(torch.tensor([4.0])), torch.tensor([4.0]))
    assert ddp.gather_to_rank_zero({"a": 1}) == [{"a": 1}]
    assert ddp.broadcast_object("x") == "x"
    ddp.barrier()
    assert ddp.resolve_on_rank_zero(lambda: "runs/exp1") == "runs/exp1"


def test_rank_zero_only_runs_on_rank_zero_only(rank_one, monkeypatch):
    calls: list[int] = []

    @ddp.rank_zero_only
    def save(value: int) -> int:
        calls.append(value)
        return value

    assert save(1) is None and calls == []
    monkeypatch.setenv("RANK", "0")
    assert save(2) == 2 and calls == [2]
    assert save.__name__ == "save"


class _ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def test_rank_logging_keeps_warnings_only_prefixed_with_the_rank():
    root = logging.getLogger()
    handler = _ListHandler()
    root.addHandler(handler)
    try:
        installed = ddp.configure_rank_logging(rank=1)
        assert ddp.configure_rank_logging(rank=1) is not None
        assert sum(isinstance(f, logging.Filter) for f in handler.filters) == 1  # not stacked
        log = logging.getLogger("libreyolo_ddp.test_child")
        log.setLevel(logging.DEBUG)
        log.info("epoch %d done", 3)
        log.warning("slow rank: %.1f s", 2.5)
        assert handler.lines == ["[rank 1] slow rank: 2.5 s"]
        assert ddp.configure_rank_logging(rank=0) is None
    finally:
        # The filter went onto every root handler, pytest's own capture handlers included:
        # take it off all of them, or later tests would lose their INFO records.
        root.removeHandler(handler)
        others = [*root.handlers, *([logging.lastResort] if logging.lastResort is not None else [])]
        for h in others:
            for f in list(h.filters):
                if f is installed or isinstance(f, type(installed)):
                    h.removeFilter(f)
