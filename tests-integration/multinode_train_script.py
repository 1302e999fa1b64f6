"""One rank of a simulated two-node torchrun job: train YOLOv9-t, then report what this rank saw.

Run by test_torchrun_multinode.py as two ``torchrun --nnodes=2`` "nodes" on one machine:
``multinode_train_script.py OUT DATA EPOCHS DEVICE SYNC_BN [KILL_RANK KILL_STEP]`` (``SYNC_BN`` is
``on`` or ``off``). On the first attempt only, rank ``KILL_RANK`` kills itself with SIGKILL before
its ``KILL_STEP``-th training step (counted from 1 over the run), so torchrun (``--max-restarts``)
restarts the whole group.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import torch

from libreyolo_models import LibreYOLO
from libreyolo_models.train import step


def _kill_at(rank: int, at_step: int, out: Path) -> None:
    """Make rank ``rank`` die hard at its ``at_step``-th step, as a lost node or OOM kill would."""
    real = step.TrainStep.forward_backward
    count = {"steps": 0}

    def forward_backward(self: step.TrainStep, images: torch.Tensor, targets: object) -> torch.Tensor:
        count["steps"] += 1
        if int(os.environ["RANK"]) == rank and count["steps"] == at_step:
            (out / f"killed-rank{rank}").write_text(str(at_step))
            os.kill(os.getpid(), signal.SIGKILL)
        return real(self, images, targets)

    step.TrainStep.forward_backward = forward_backward  # type: ignore[method-assign]


def main() -> None:
    out, data, epochs, device = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
    sync_bn = sys.argv[5] == "on"
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if len(sys.argv) > 6 and restart == 0:
        _kill_at(int(sys.argv[6]), int(sys.argv[7]), out)
    model = LibreYOLO("LibreYOLO9t.yaml")
    outcome = model.train(data=data, epochs=epochs, imgsz=64, batch=8, workers=0, device=device,
                          project=str(out / "runs"), name="exp", verbose=False, plots=False, sync_bn=sync_bn)
    rank = int(os.environ["RANK"])
    report = {"rank": rank, "local_rank": int(os.environ["LOCAL_RANK"]), "world": int(os.environ["WORLD_SIZE"]),
              "restart": restart, "run_dir": str(outcome.run_dir), "epochs_run": outcome.epochs_run,
              "metrics": outcome.metrics}
    (out / f"report-rank{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main()
