"""Training numerics classes across packages on CPU: a toy family joined through
``register_family`` is measured like any zoo family, and ``tools/numerics_classes.py`` writes its
block into the parity matrix (the rest kept) and merges its certificates (CPU dry run: the third
run is eager, so every row says it was not graphed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from libreyolo_models import register_family, unregister_family
from libreyolo_models.train.numerics import measure_numerics

sys.path.insert(0, str(Path(__file__).parent))
from toy_family import SPEC  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"imgsz": 64, "batch": 2, "steps": 3, "device": "cpu"}


@pytest.fixture
def toy() -> Iterator[None]:
    register_family(SPEC)
    try:
        yield
    finally:
        unregister_family(SPEC.name)


def test_a_toy_family_is_measured_exact_and_a_perturbed_arm_diverges(toy) -> None:
    report, cert = measure_numerics("toydet", "n", candidate="eager", **SMALL)
    assert report.numerics_class == "exact" and (cert.family, cert.graphed) == ("toydet", False)

    def shifted(module):
        return lambda x: module(x) + 1e-3

    assert measure_numerics("toydet", "n", candidate=shifted, **SMALL)[0].numerics_class == "diverges"


@pytest.mark.slow
def test_the_tool_replaces_its_block_and_merges_certificates(tmp_path: Path) -> None:
    doc = tmp_path / "parity-matrix.md"
    doc.write_text("# matrix\n\nkept above\n\n<!-- numerics-classes:start: old -->\nstale\n"
                   "<!-- numerics-classes:end -->\n\nkept below\n")
    table = tmp_path / "certificates.json"
    other = {"family": "resnet", "size": "18", "task": "classify", "dtype": "float32", "device": "cuda",
             "torch": "2.11.0+cu130", "cuda": "13.0", "cudnn": "91500", "gpu": "NVIDIA H200", "numerics_class": "exact",
             "graphed": True, "date": "2026-12-01", "source": "earlier"}
    table.write_text(json.dumps([other]))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "numerics_classes.py"), "--rows", "yolo9:t",
                           "--precisions", "fp32", "--device", "cpu", "--candidate", "eager", "--imgsz", "64",
                           "--batch", "2", "--steps", "1", "--jobs", "2", "--out", str(doc), "--certificates", str(table)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = doc.read_text()
    assert text.startswith("# matrix\n\nkept above") and text.rstrip().endswith("kept below")
    assert "stale" not in text and text.count("numerics-classes:start") == 1
    assert "| yolo9 | t | detect | float32 | cpu | exact | no |" in text
    assert "| resnet | 18 | classify | float32 | cuda | exact | yes |" in text
    rows = json.loads(table.read_text())
    assert [(r["family"], r["numerics_class"], r["graphed"]) for r in rows] == [
        ("resnet", "exact", True), ("yolo9", "exact", False)]
