"""Trains until killed (test_resume_after_kill.py sends SIGKILL mid-epoch), or resumes with --resume."""

from __future__ import annotations

import sys

from libreyolo_models import LibreYOLO


def main() -> None:
    project, data = sys.argv[1], sys.argv[2]
    if "--resume" in sys.argv:
        LibreYOLO(f"{project}/exp/weights/last.pt").train(resume=True)
        return
    LibreYOLO("LibreYOLO9t.yaml").train(data=data, epochs=3, imgsz=64, batch=4, workers=0, device="cpu",
                                        project=project, name="exp", verbose=False, plots=False)


if __name__ == "__main__":
    main()
