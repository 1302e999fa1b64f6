"""The package stands alone: torch only, no model zoo, the public API importable by name."""

from __future__ import annotations

import subprocess
import sys

import pytest

import libreyolo_cudagraph

PUBLIC = [
    "capture_lock",
    "thread_local_graphs",
    "preserved_state",
    "GraphRunner",
    "GraphMode",
    "RunnerInfo",
    "GraphInfo",
    "SplitGraphRunner",
    "GraphedTraining",
    "verify_parity",
    "ParityReport",
    "certify_in_subprocess",
    "compare_train_step",
    "TrainParityReport",
    "CudaGraphError",
    "contrasting_probes",
    "graphed_callables",
    "TrainingInfo",
]


def test_public_api_names_are_exported():
    missing = [name for name in PUBLIC if not hasattr(libreyolo_cudagraph, name)]
    assert missing == []
    assert set(PUBLIC) <= set(libreyolo_cudagraph.__all__)
    assert issubclass(libreyolo_cudagraph.CudaGraphError, RuntimeError)


@pytest.mark.slow  # a fresh interpreter importing torch
def test_importing_the_package_loads_no_model_zoo_and_no_torchvision():
    code = (
        "import sys, libreyolo_cudagraph\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('libreyolo_models', 'libreyolo', 'torchvision'))\n"
        "print(','.join(bad))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == ""
