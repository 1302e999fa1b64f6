"""A family's training numerics class on CPU (YOLOv9-t, 64 px, batch 2, a few steps): two eager
runs are exact, a perturbed third run is classed by the spread rule. The graphed arm needs a GPU
(``tools/numerics_classes.py`` there); here a second implementation of the forward stands in."""

from __future__ import annotations

import pytest
import torch

from libreyolo_models import ConfigError
from libreyolo_models.certificate import Certificate, current_environment
from libreyolo_models.tensor_trees import map_tensors
from libreyolo_models.train.numerics import measure_numerics

SMALL = {"imgsz": 64, "batch": 2, "steps": 3, "device": "cpu"}


def shifted(eps: float):
    """A forward that adds ``eps`` to every training output: a stand-in for an arm that computes
    slightly different numbers (``eps`` and ``-eps`` are equally far from eager)."""
    def wrap(module):
        return lambda x: map_tensors(module(x), lambda t: t + eps)

    return wrap


def test_two_eager_runs_and_a_third_are_exact_and_the_certificate_says_not_graphed() -> None:
    report, cert = measure_numerics("yolo9", "t", candidate="eager", **SMALL)
    assert report.numerics_class == "exact" and report.steps == 3, report.summary()
    assert isinstance(cert, Certificate)
    assert (cert.family, cert.size, cert.task, cert.dtype, cert.batch, cert.device) == (
        "yolo9", "t", "detect", "float32", 2, "cpu")
    assert cert.numerics_class == "exact" and cert.graphed is False
    assert cert.environment() == current_environment(torch.device("cpu"))
    assert set(cert.probe_hashes) == {"A", "B", "trace"} and cert.probe_hashes["trace"] == report.reference_hash
    assert cert.spread == {"loss": 0.0, "weights": 0.0, "grads": 0.0, "buffers": 0.0}
    assert "3 steps" in cert.source


def test_a_perturbed_arm_diverges_where_eager_reproduces_itself() -> None:
    report, cert = measure_numerics("yolo9", "t", candidate=shifted(1e-3), **SMALL)
    assert report.numerics_class == "diverges" and cert.numerics_class == "diverges"
    assert all(v > 0 for v in cert.distance.values())


def test_a_perturbation_within_a_noisy_controls_spread_is_eager_noise() -> None:
    report, cert = measure_numerics("yolo9", "t", control=shifted(1e-3), candidate=shifted(-1e-3), **SMALL)
    assert report.numerics_class == "eager-noise", report.summary()
    assert all(v > 0 for v in cert.spread.values())


def test_amp_rows_need_a_gpu() -> None:
    with pytest.raises(ConfigError, match="amp=True measures fp16 autocast, which needs a CUDA device"):
        measure_numerics("yolo9", "t", amp=True, **SMALL)
