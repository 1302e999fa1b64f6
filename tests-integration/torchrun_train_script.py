"""One torchrun rank: train YOLOv9-t for one epoch, then record this rank's parameters.

Run by test_torchrun_cpu.py as ``torchrun --nproc_per_node=2 torchrun_train_script.py OUT DATA``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

from libreyolo_models import LibreYOLO


def main() -> None:
    out, data = Path(sys.argv[1]), sys.argv[2]
    model = LibreYOLO("LibreYOLO9t.yaml")
    outcome = model.train(data=data, epochs=1, imgsz=64, batch=8, workers=0, device="cpu",
                          project=str(out / "runs"), name="exp", verbose=False, plots=False)
    rank = int(os.environ["RANK"])
    digest = torch.cat([p.detach().flatten().double() for p in model.net.parameters()])
    torch.save({"params": digest, "run_dir": str(outcome.run_dir)}, out / f"rank{rank}.pt")


if __name__ == "__main__":
    main()
