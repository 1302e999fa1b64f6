"""The run folder as training uses it: claimed by one live run (rank 0 holds its lock), and on
resume given back the ``best.pt`` its record says it had.

``best.pt`` is written after ``last.pt`` in the epoch that improved, so a run killed while
writing it keeps a ``last.pt`` whose record (``best_epoch``) names that very epoch: its weights
are the best ones, and ``restore_missing_best`` writes them back. When the best epoch is an
earlier one and no ``epoch{N}.pt`` of it was kept, its weights are gone: the record is reset, so
the next validated epoch becomes the best and writes ``best.pt``, and the final line never names
a file that does not exist.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import libreyolo_ddp

from ..checkpoint import atomic_save, load_checkpoint
from ..run_lock import RunLock
from ..rundir import claim_run_dir
from .checkpoints import best_weights
from .elastic import record_run_dir
from .settings import TrainConfig

log = logging.getLogger(__name__)


def claim_training_folder(cfg: TrainConfig, resume: Mapping[str, Any] | None) -> tuple[Path, RunLock | None]:
    """The run's folder on every rank, and its lock on rank 0 (None elsewhere).

    A new run numbers a new folder (or, ``exist_ok=True``, takes ``project/name``); a resumed one
    takes the folder its checkpoint names. Either is refused while another live run holds it.
    """
    held: list[RunLock] = []

    def claim() -> str:
        if resume:
            folder = Path(str(resume["run_dir"]))
            held.append(RunLock.acquire(folder))
        else:
            folder, lock = claim_run_dir(cfg.project, cfg.name, exist_ok=cfg.exist_ok)
            held.append(lock)
        record_run_dir(cfg.project, folder)  # torchrun: where a restart of this job resumes
        return str(folder)

    run_dir = Path(libreyolo_ddp.resolve_on_rank_zero(claim))
    return run_dir, held[0] if held else None


def restore_missing_best(weights_dir: Path, ckpt: Mapping[str, Any]) -> bool:
    """On resume (rank 0): put back a ``best.pt`` that the record names but the folder lacks.

    Returns True when its weights are in no file, so the caller resets the best record.
    """
    best = weights_dir / "best.pt"
    best_epoch, epoch = int(ckpt.get("best_epoch", -1)), int(ckpt.get("epoch", -1))
    if best_epoch < 0 or best.is_file():
        return False
    if best_epoch == epoch:  # the checkpoint resumed from is the best epoch's own
        atomic_save(best_weights(ckpt), best)
        log.warning("resume: %s was missing (an interrupted write?); written again from epoch %d's checkpoint, "
                    "which the record names as the best", best, best_epoch + 1)
        return False
    kept = weights_dir / f"epoch{best_epoch + 1}.pt"
    if kept.is_file():
        atomic_save(best_weights(load_checkpoint(kept)), best)
        log.warning("resume: %s was missing; copied from %s (the best epoch, kept by save_period)", best, kept)
        return False
    log.warning("resume: %s (epoch %d, %s %.4f) is missing and its weights are in no other file; the best is "
                "tracked afresh from the next epoch, whose validation writes best.pt", best, best_epoch + 1,
                ckpt.get("best_metric_name", "fitness"), float(ckpt.get("best_fitness", 0.0)))
    return True
