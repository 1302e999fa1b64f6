"""Certification in a fresh process: argument checks, a crashing child, a report read back."""

from __future__ import annotations

import json

import pytest

from libreyolo_cudagraph import GraphConfigError, ParityReport, certify_in_subprocess
from libreyolo_cudagraph.certify import main


@pytest.mark.parametrize("factory", ["torchvision.models.resnet18", ":resnet18", "torchvision.models:"])
def test_factory_without_module_and_callable_is_rejected_before_spawning(factory):
    with pytest.raises(GraphConfigError, match="package.module:callable"):
        certify_in_subprocess(factory, input_shape=(1, 3, 8, 8))


def test_unknown_dtype_and_unserialisable_kwargs_are_rejected():
    with pytest.raises(GraphConfigError, match="'float33'"):
        certify_in_subprocess("torch.nn:Identity", input_shape=(1,), dtype="float33")
    with pytest.raises(GraphConfigError, match="JSON"):
        certify_in_subprocess("torch.nn:Identity", input_shape=(1,), kwargs={"bad": object()})


def test_child_entry_point_writes_a_report_the_parent_can_read(tmp_path):
    out = tmp_path / "report.json"
    code = main(
        [
            "--factory",
            "torch.nn:Conv2d",
            "--kwargs",
            json.dumps({"in_channels": 3, "out_channels": 2, "kernel_size": 3}),
            "--input-shape",
            "1,3,8,8",
            "--device",
            "cpu",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    report = ParityReport.from_dict(json.loads(out.read_text()))
    assert report.name == "torch.nn:Conv2d" and not report.graphed and "cpu" in report.reason


@pytest.mark.slow
def test_crashing_child_becomes_a_failed_report_with_its_stderr_tail():
    report = certify_in_subprocess(
        "libreyolo_no_such_module:build", input_shape=(1, 3, 8, 8), device="cpu", timeout_s=300
    )
    assert not report.ok and not report.graphed
    assert "exited with status 1" in report.reason
    assert "ModuleNotFoundError" in report.reason and "libreyolo_no_such_module" in report.reason
