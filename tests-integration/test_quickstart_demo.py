"""The README's first command, as written there, labels every shape of the sample picture right,
whatever the machine: run with one and with two CPU threads (thread count is what makes CPU
training differ between machines: it reorders floating-point sums)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
MIN_IOU = 0.5


def _readme_commands() -> tuple[list[str], list[str]]:
    """The ``libreyolo train ...`` and ``libreyolo predict ...`` words of the README's quick start."""
    text = (ROOT / "README.md").read_text()
    line = next(ln for ln in text.splitlines() if "libreyolo train" in ln and "libreyolo predict" in ln)
    train = re.search(r"libreyolo (train [^&]+)", line)
    predict = re.search(r"libreyolo (predict [^&]+)", line)
    assert train and predict, line
    return shlex.split(train.group(1)), shlex.split(predict.group(1))


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    lt, rb = np.maximum(a[:2], b[:2]), np.minimum(a[2:], b[2:])
    inter = float(np.prod(np.clip(rb - lt, 0, None)))
    return inter / (float(np.prod(a[2:] - a[:2])) + float(np.prod(b[2:] - b[:2])) - inter)


def test_the_sample_asset_is_the_generated_picture() -> None:
    from PIL import Image

    from libreyolo_models import SAMPLE_IMAGE
    from libreyolo_models.data.shapes import render_sample

    pixels, rows = render_sample()
    asset = np.asarray(Image.open(SAMPLE_IMAGE).convert("RGB"), dtype=np.int16)
    assert asset.shape == pixels.shape and np.abs(asset - pixels).mean() < 6.0  # JPEG noise on the grain only
    assert sorted(int(r.split()[0]) for r in rows) == [0, 1, 2, 3, 4]  # one shape of each class


@pytest.mark.slow
@pytest.mark.learning
@pytest.mark.parametrize("threads", [1, 2])
def test_quickstart_model_labels_every_shape_of_the_sample_right(tmp_path: Path, threads: int) -> None:
    from libreyolo_models import SAMPLE_IMAGE, LibreYOLO
    from libreyolo_models.data.shapes import CLASS_NAMES, render_sample

    train, predict = _readme_commands()
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    for words in (train, predict):
        done = subprocess.run([sys.executable, "-m", "libreyolo_cli.main", *words], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=3600)
        assert done.returncode == 0, done.stderr[-4000:]
    printed = done.stdout.strip().splitlines()
    assert len(printed) == 1 and printed[0].startswith(str(SAMPLE_IMAGE))
    conf = float(next(w.split("=", 1)[1] for w in predict if w.startswith("conf=")))
    model = LibreYOLO(tmp_path / "runs" / "train" / "quickstart" / "weights" / "best.pt")
    (result,) = model(SAMPLE_IMAGE, conf=conf)
    _, rows = render_sample()
    h, w = result.orig_shape
    truth = []
    for row in rows:
        cls, cx, cy, bw, bh = (float(v) for v in row.split())
        truth.append((int(cls), np.array([(cx - bw / 2) * w, (cy - bh / 2) * h, (cx + bw / 2) * w, (cy + bh / 2) * h])))
    found = [(int(row[5]), np.array(row[:4])) for row in result.boxes.data.tolist()]
    for cls, box in truth:  # every shape found, under its own name
        hits = [c for c, b in found if _iou(box, b) >= MIN_IOU]
        assert hits == [cls], f"{CLASS_NAMES[cls]} at {box.round()} labelled {[CLASS_NAMES[c] for c in hits]}"
    for c, b in found:  # nothing else: no second label on a shape, nothing on the background
        assert any(_iou(box, b) >= MIN_IOU and cls == c for cls, box in truth), f"stray {CLASS_NAMES[c]} at {b}"
