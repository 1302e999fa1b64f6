"""A run folder belongs to one live training run, and a resumed run finds what its record promises:
the lock (refusal, numbering, release, stale locks), best.pt rewritten after a kill, and a changed
class count named on resume."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from libreyolo_models import LibreYOLO
from libreyolo_models.data.errors import DataConfigError
from libreyolo_models.errors import ConfigError, RunFolderBusyError
from libreyolo_models.run_lock import LOCK_NAME, RunLock
from libreyolo_models.rundir import claim_run_dir
from libreyolo_models.train.run_folder import restore_missing_best

TINY = {"imgsz": 64, "batch": 2, "workers": 0, "epochs": 1, "plots": False, "verbose": False}


@pytest.fixture()
def micro_shapes(tmp_path: Path) -> Path:
    """Four training and two validation images in this test's own folder (a test may edit it)."""
    from libreyolo_models.data.shapes import generate_shapes

    generate_shapes(tmp_path / "data", split_sizes={"train": 4, "val": 2})
    return tmp_path / "data" / "data.yaml"


def _train(data: Path, project: Path, **options: object):  # type: ignore[no-untyped-def]
    return LibreYOLO("LibreYOLO9t.yaml").train(data=str(data), project=str(project), **{**TINY, **options})


def test_a_second_run_with_the_same_name_and_exist_ok_is_refused_while_the_first_runs(
        micro_shapes: Path, tmp_path: Path) -> None:
    folder = tmp_path / "runs" / "exp"
    with RunLock.acquire(folder):  # the first run, still training
        with pytest.raises(RunFolderBusyError, match=rf"run folder {folder} is in use by another training run "
                                                     rf"\(process {os.getpid()} on .*\).*another name=") as err:
            _train(micro_shapes, tmp_path / "runs", name="exp", exist_ok=True)
    assert "\n" not in str(err.value)
    assert not (folder / "weights").exists() and not (folder / "args.yaml").exists()  # nothing of the second run


def test_a_second_run_without_exist_ok_numbers_a_folder_of_its_own(tmp_path: Path) -> None:
    with RunLock.acquire(tmp_path / "exp"):
        folder, lock = claim_run_dir(tmp_path, "exp")
        with lock:
            assert folder == tmp_path / "exp2" and lock.held


def test_the_lock_is_released_when_training_ends(micro_shapes: Path, tmp_path: Path) -> None:
    outcome = _train(micro_shapes, tmp_path, val=False)
    lock_file = outcome.run_dir / LOCK_NAME
    assert lock_file.is_file() and lock_file.read_text() == ""  # emptied: released cleanly, not stale
    with RunLock.acquire(outcome.run_dir) as again:
        assert again.held


def test_the_lock_is_released_when_training_fails(micro_shapes: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from libreyolo_models.train import trainer

    def fail(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(trainer.Trainer, "_one_epoch", fail)
    with pytest.raises(RuntimeError, match="boom"):
        _train(micro_shapes, tmp_path, name="x")
    with RunLock.acquire(tmp_path / "x") as again:
        assert again.held


def test_a_lock_left_by_a_killed_run_is_taken_over_with_one_line(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    folder = tmp_path / "exp"
    script = textwrap.dedent(f"""
        import os, signal, sys
        from libreyolo_models.run_lock import RunLock
        RunLock.acquire({str(folder)!r})
        print(os.getpid(), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=os.environ.copy())
    assert done.returncode == -signal.SIGKILL, done.stderr
    dead = done.stdout.strip()
    assert (folder / LOCK_NAME).read_text().split()[1] == dead  # the killed owner's record stays behind
    with caplog.at_level(logging.INFO, logger="libreyolo_models.run_lock"), RunLock.acquire(folder) as lock:
        assert lock.held
    assert f"the lock of process {dead} on " in caplog.text and "ended without releasing it, is taken over" in caplog.text


def test_a_resume_while_the_run_is_live_is_refused(micro_shapes: Path, tmp_path: Path) -> None:
    outcome = _train(micro_shapes, tmp_path, val=False)
    with RunLock.acquire(outcome.run_dir), pytest.raises(RunFolderBusyError, match="in use by another training run"):
        LibreYOLO(outcome.last).train(resume=True, epochs=2)


def test_resume_rewrites_best_pt_lost_to_a_kill_during_its_write(micro_shapes: Path, tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    outcome = _train(micro_shapes, tmp_path)
    best = outcome.run_dir / "weights" / "best.pt"
    saved = torch.load(best, weights_only=True)
    best.unlink()  # killed while best.pt was being written: last.pt of that epoch is complete
    model = LibreYOLO(outcome.last)
    with caplog.at_level(logging.WARNING):
        again = model.train(resume=True, epochs=2)
    assert "was missing (an interrupted write?); written again from epoch 1's checkpoint" in caplog.text
    assert again.best is not None and again.best.is_file()
    restored = torch.load(best, weights_only=True)
    assert restored["best_epoch"] in (0, 1)
    if restored["best_epoch"] == 0:  # epoch 2 did not improve: the rewritten file is epoch 1's
        assert all(torch.equal(saved["model"][k], restored["model"][k]) for k in saved["model"])


def test_best_pt_holds_the_deployable_weights_and_resume_from_it_points_at_last_pt(micro_shapes: Path,
                                                                                   tmp_path: Path) -> None:
    outcome = _train(micro_shapes, tmp_path)
    best, last = outcome.run_dir / "weights" / "best.pt", outcome.last
    saved, full = torch.load(best, weights_only=True), torch.load(last, weights_only=True)
    assert not {"optimizer", "train_model", "ema", "scaler"} & saved.keys()  # only a resume reads them
    assert saved["best_epoch"] == 0 and "certificate" in saved and "config" in saved
    assert all(torch.equal(saved["model"][k], full["model"][k]) for k in full["model"])  # the EMA weights
    assert best.stat().st_size < last.stat().st_size / 2.5  # AdamW: weights, raw weights and two moments
    LibreYOLO(best).predict(torch.zeros(1, 3, 64, 64), verbose=False)  # deploys as before
    with pytest.raises(ConfigError, match=r"holds the best epoch's weights only .*resume from the run's last.pt: "
                                          r"LibreYOLO\('.*last\.pt'\)\.train\(resume=True\)"):
        LibreYOLO(best).train(resume=True, epochs=2)


def test_resume_starts_the_best_record_afresh_when_its_weights_are_in_no_file(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    record = {"best_epoch": 1, "epoch": 3, "best_fitness": 0.5, "best_metric_name": "mAP50-95"}
    with caplog.at_level(logging.WARNING):
        assert restore_missing_best(tmp_path, record) is True
    assert "best.pt (epoch 2, mAP50-95 0.5000) is missing and its weights are in no other file" in caplog.text
    torch.save({"model": {}}, tmp_path / "epoch2.pt")  # save_period kept it
    assert restore_missing_best(tmp_path, record) is False and (tmp_path / "best.pt").is_file()


def test_resume_with_a_changed_class_count_says_what_changed_and_what_to_do(micro_shapes: Path,
                                                                            tmp_path: Path) -> None:
    outcome = _train(micro_shapes, tmp_path, val=False)
    import yaml

    config = yaml.safe_load(micro_shapes.read_text())
    assert len(config["names"]) == 5
    config.pop("nc", None)
    micro_shapes.write_text(yaml.safe_dump({**config, "names": ["a", "b", "c", "d", "e", "f", "g"]}))
    with pytest.raises(DataConfigError, match=r"resume: data=.* now has 7 classes \(f, g added\) but the run trained "
                                              r"5; .*Restore the dataset's 5 classes to resume, or start a new run "
                                              r"from these weights without resume=True") as err:
        LibreYOLO(outcome.last).train(resume=True, epochs=2)
    assert "\n" not in str(err.value) and "size mismatch" not in str(err.value)
    shutil.rmtree(outcome.run_dir)
