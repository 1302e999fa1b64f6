"""DataLoader workers: capped by the cores and the memory, each cap one logged line."""

from __future__ import annotations

import logging

import pytest

from libreyolo_models import workers


@pytest.fixture()
def machine(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    def set_machine(cores: int, gib: float | None) -> None:
        monkeypatch.setattr(workers, "usable_cores", lambda: cores)
        monkeypatch.setattr(workers, "mem_available_bytes", lambda: None if gib is None else int(gib * 2**30))

    return set_machine


def test_workers_1000_on_2_cores_is_capped_with_one_line(machine, caplog: pytest.LogCaptureFixture) -> None:
    machine(2, 17.0)
    with caplog.at_level(logging.WARNING):
        assert workers.default_workers(1000, batch=16) == 2
    (record,) = caplog.records
    assert "workers=1000 capped to 2 (2 usable CPU cores, 17.0 GiB of memory available" in record.getMessage()


def test_workers_are_capped_by_the_available_memory(machine, caplog: pytest.LogCaptureFixture) -> None:
    machine(64, 1.2)  # two workers' worth at 512 MiB each
    with caplog.at_level(logging.INFO):
        assert workers.default_workers(16, batch=16) == 2
        assert workers.default_workers(None, batch=16) == 2
    machine(64, 0.3)
    assert workers.default_workers(4, batch=16) == 0  # load in the main process rather than swap


def test_workers_within_the_caps_are_kept_as_given(machine, caplog: pytest.LogCaptureFixture) -> None:
    machine(16, None)  # no /proc/meminfo: the cores alone cap
    with caplog.at_level(logging.WARNING):
        assert workers.default_workers(3, batch=16) == 3
        assert workers.default_workers(0, batch=16) == 0
    assert not caplog.records
    assert workers.default_workers(None, batch=16) == 8
    assert workers.default_workers(None, batch=16, world_size=4) == 3
    assert workers.default_workers(20, batch=16, world_size=4) == 4
