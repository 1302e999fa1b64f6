"""Train YOLOv9-t on the bundled ``shapes`` set on the CPU and keep its validation plots for the
README (``docs/images/``): the normalised confusion matrix and the PR curve.

    uv run python tools/make_readme_plots.py                      # about 10 minutes on 2 idle CPU cores
    uv run python tools/make_readme_plots.py epochs=6 imgsz=64    # key=value pairs override the recipe

The recipe is the learning test's (tests/test_train_learns.py), which reaches mAP50 >= 0.5.
The caption in the README says which recipe made the committed image.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from libreyolo_models import LibreYOLO

RECIPE = {"data": "shapes", "imgsz": 128, "batch": 16, "nbs": 16, "epochs": 12, "close_mosaic": 4, "workers": 0,
          "val": False, "device": "cpu", "verbose": False}
KEEP = {"confusion_matrix_normalized.png": "shapes_confusion_matrix.png", "PR_curve.png": "shapes_pr_curve.png"}


def main(argv: list[str]) -> int:
    if not all("=" in word for word in argv):  # --help, or a word that is not key=value
        print(__doc__)
        return 0 if argv in (["-h"], ["--help"]) else 2
    overrides = dict(word.split("=", 1) for word in argv)
    out = Path(__file__).resolve().parents[1] / "docs" / "images"
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        outcome = LibreYOLO("LibreYOLO9t.yaml").train(project=tmp, **{**RECIPE, **overrides})
        for src, dst in KEEP.items():
            shutil.copyfile(outcome.run_dir / src, out / dst)
    print(f"{outcome.summary()}\nwrote {', '.join(str(out / d) for d in KEEP.values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
