"""torchrun restarts resume on their own: ``--max-restarts`` brings a killed job back at ``last.pt``.

When a rank dies, torchrun (with ``--max-restarts``) stops the group and starts it again with the
same command. The script then calls ``model.train(...)`` as on the first attempt; without help it
would start from scratch in a new run folder. So, under torchrun:

- rank 0 records the run folder it trains in under the job's rendezvous id
  (``<project>/.elastic/<run id>``, one line) and deletes the record when the run completes;
- when training starts, rank 0 looks the record up: if it exists and its run folder holds a
  ``last.pt``, this is a restart of an unfinished job, and rank 0 reads ``last.pt`` and
  broadcasts it; every rank then resumes from it, exactly as ``train(resume=True)`` would. Other
  nodes need not see rank 0's disk.

The decision is rank 0's, broadcast, not each rank's ``TORCHELASTIC_RESTART_COUNT``: torchrun
counts restarts per node agent, and a node whose agent restarted only because another node failed
still reports 0. A job re-run by hand with the same ``--rdzv_id`` after a crash resumes too; a
completed run has no record left, so reusing an id never resumes a finished run.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import libreyolo_ddp

from ..atomic_write import atomic_write
from ..checkpoint import load_checkpoint
from .checkpoints import is_training_checkpoint

log = logging.getLogger(__name__)


def _record_path(project: str | Path, run_id: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", run_id)[:100] or "job"
    return Path(project).expanduser() / ".elastic" / safe


def record_run_dir(project: str | Path, run_dir: Path) -> None:
    """Rank 0, under torchrun: remember ``run_dir`` for a later restart of this job (no-op elsewhere)."""
    job = libreyolo_ddp.elastic_run()
    if job is None:
        return
    text = f"{Path(run_dir).absolute()}\n".encode()
    atomic_write(_record_path(project, job.run_id), lambda fh: fh.write(text))


def restart_checkpoint(project: str | Path) -> dict[str, Any] | None:
    """Under torchrun, the unfinished job's ``last.pt`` as a dict on every rank; None otherwise.

    A collective under torchrun (every rank must call it); nothing outside torchrun.
    """
    job = libreyolo_ddp.elastic_run()
    if job is None:
        return None
    return libreyolo_ddp.broadcast_object(_read_last(project, job) if libreyolo_ddp.is_rank_zero() else None)


def forget_run(project: str | Path) -> None:
    """Rank 0, when the run completed: remove the job's record, so the id never resumes a finished run."""
    job = libreyolo_ddp.elastic_run()
    if job is not None:
        record = _record_path(project, job.run_id)
        record.unlink(missing_ok=True)
        try:
            record.parent.rmdir()  # the records folder goes with its last record: nothing left behind
        except OSError:
            pass  # another job's record is still there, or the folder is gone already


def _read_last(project: str | Path, job: libreyolo_ddp.ElasticRun) -> dict[str, Any] | None:
    record = _record_path(project, job.run_id)
    try:
        run_dir = Path(record.read_text().strip())
    except OSError:
        return None  # the job's first attempt
    last = run_dir / "weights" / "last.pt"
    if not last.is_file():
        log.info("torchrun job %s: %s has no last.pt yet; starting a new run", job.run_id, run_dir)
        return None
    ckpt = load_checkpoint(last)
    if not is_training_checkpoint(ckpt):
        return None
    log.warning("torchrun job %s restarted: resuming %s from %s (epoch %d done)", job.run_id, run_dir, last,
                int(ckpt["epoch"]) + 1)
    ckpt["_path"] = str(last)
    return ckpt
