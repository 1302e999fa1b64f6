"""Files the zoo writes get the user's umask, and interrupted writes leave nothing behind for long."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from libreyolo_models.atomic_write import atomic_write, owner_tag, remove_stale_temps, umask_mode
from libreyolo_models.checkpoint import atomic_save
from libreyolo_models.train.results_log import ResultsLog

DEAD = f"{owner_tag().rsplit('-', 1)[0]}-999999999"  # this host, a pid that is not running


@pytest.fixture(params=[0o022, 0o027, 0o077])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_checkpoints_and_results_csv_follow_the_umask(tmp_path: Path, umask: int) -> None:
    assert umask_mode() == 0o666 & ~umask
    ckpt = atomic_save({"w": torch.zeros(2)}, tmp_path / "weights" / "last.pt")
    log = ResultsLog(tmp_path / "results.csv")
    log.append({"epoch": 1, "train/loss": 0.5})
    assert _mode(ckpt) == 0o666 & ~umask  # 0o644 under the usual 022, not mkstemp's 0o600
    assert _mode(log.path) == 0o666 & ~umask


def test_the_next_write_removes_a_killed_writes_temp_file(tmp_path: Path) -> None:
    dead = tmp_path / f".last.pt.{DEAD}.abc123.tmp"
    alive = tmp_path / f".last.pt.{owner_tag()}.def456.tmp"  # this process: a write in progress
    other_target = tmp_path / f".best.pt.{DEAD}.xyz.tmp"
    for p in (dead, alive, other_target):
        p.write_bytes(b"half a checkpoint")
    atomic_write(tmp_path / "last.pt", lambda fh: fh.write(b"new"))
    assert not dead.exists() and alive.exists() and other_target.exists()
    assert (tmp_path / "last.pt").read_bytes() == b"new"


def test_a_run_folder_owner_removes_every_temp_file_even_without_an_owner_tag(tmp_path: Path) -> None:
    legacy = tmp_path / ".last.pt.k2j3h4.tmp"  # written by an older version: no owner in the name
    legacy.write_bytes(b"x")
    keep = tmp_path / "notes.tmp"  # not one of ours: no leading dot
    keep.write_bytes(b"x")
    assert remove_stale_temps(tmp_path) == []  # unknown owner: left alone by default
    assert remove_stale_temps(tmp_path, owned_folder=True) == [legacy]
    assert keep.exists()


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "last.pt"
    target.write_bytes(b"old")

    def explode(fh: object) -> None:
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_write(target, explode)
    assert target.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]
