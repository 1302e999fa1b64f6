"""Numerics certificates on CPU: every training checkpoint carries one, ``graph_info()`` shows it and
says whether this environment matches the certified one (a mismatch informs, never refuses)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from libreyolo_models import SAMPLE_IMAGE, LibreYOLO, LibreYOLO9
from libreyolo_models.certificate import (
    Certificate,
    certified_table,
    current_environment,
    describe_numerics,
    probe_hashes,
)
from libreyolo_models.checkpoint import load_checkpoint

FAST = {"imgsz": 64, "batch": 8, "workers": 0, "epochs": 1, "val": False, "plots": False, "verbose": False}


def table_row(**overrides: object) -> dict:
    row = {"family": "yolo9", "size": "t", "task": "detect", "dtype": "float32", "batch": 8, "device": "cpu",
           **current_environment(), "numerics_class": "exact", "graphed": False, "probe_hashes": {},
           "date": "2026-12-05", "source": "test"}
    row.update(overrides)
    return row


@pytest.fixture(scope="module")
def trained(mini_shapes: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """One epoch of YOLOv9-t with cuda_graph=True (on the CPU it trains eagerly), with a shipped
    table that certifies float32 on the CPU as exact."""
    tmp = tmp_path_factory.mktemp("cert")
    table = tmp / "certificates.json"
    table.write_text(json.dumps([table_row()]))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("libreyolo_models.certificate.CERTIFICATES_FILE", table)
        LibreYOLO9(size="t").train(data=str(mini_shapes), project=str(tmp / "runs"), cuda_graph=True, **FAST)
    return tmp / "runs" / "exp" / "weights" / "last.pt", table


def test_a_training_checkpoint_carries_the_certificate_of_its_run(trained) -> None:
    last, _ = trained
    cert = Certificate.from_dict(load_checkpoint(last)["certificate"])
    assert (cert.family, cert.size, cert.task, cert.dtype, cert.batch, cert.device) == (
        "yolo9", "t", "detect", "float32", 8, "cpu")
    assert cert.graphed is False  # cuda_graph=True on a CPU trains eagerly, and the record says so
    assert cert.numerics_class == "exact"  # the (patched) table's class for this configuration
    assert cert.environment() == current_environment() and cert.source == "train"
    assert set(cert.probe_hashes) == {"A", "B"} and all(len(h) == 16 for h in cert.probe_hashes.values())


def test_the_probe_hashes_are_those_of_the_saved_weights(trained) -> None:
    last, _ = trained
    model = LibreYOLO(str(last)).eval()
    hashes = probe_hashes(model.inference_forward, 64, device=torch.device("cpu"))
    assert hashes == load_checkpoint(last)["certificate"]["probe_hashes"]


def test_graph_info_shows_the_certificate_and_a_matching_environment(trained, monkeypatch) -> None:
    last, table = trained
    monkeypatch.setattr("libreyolo_models.certificate.CERTIFICATES_FILE", table)
    numerics = LibreYOLO(str(last)).graph_info()["numerics"]
    assert numerics["class"] == "exact" and numerics["graphed"] is False
    assert numerics["environment_matches"] is True and numerics["environment_mismatches"] == {}
    assert numerics["certified_classes"] == {"float32 on cpu": "exact"}


def test_edited_environment_fields_are_reported_as_a_mismatch_not_an_error(trained, tmp_path) -> None:
    last, _ = trained
    ckpt = load_checkpoint(last)
    ckpt["certificate"].update(torch="2.11.0+cu130", gpu="NVIDIA H200")
    edited = tmp_path / "edited.pt"
    torch.save(ckpt, edited)
    model = LibreYOLO(str(edited))
    numerics = model.graph_info()["numerics"]
    assert numerics["environment_matches"] is False
    assert numerics["environment_mismatches"] == {
        "torch": {"certified": "2.11.0+cu130", "current": torch.__version__},
        "gpu": {"certified": "NVIDIA H200", "current": None}}
    assert len(model(SAMPLE_IMAGE, imgsz=64)) == 1  # information only: the model still predicts


def test_a_model_without_a_certificate_says_so() -> None:
    numerics = LibreYOLO9(size="t", imgsz=64).graph_info()["numerics"]
    assert numerics["class"] is None and numerics["certificate"] is None and numerics["environment_matches"] is None


def test_an_unreadable_certificate_is_described_not_raised() -> None:
    info = describe_numerics({"certificate": {"family": "yolo9"}}, family="yolo9", size="t", task="detect",
                             device=torch.device("cpu"))
    assert "unreadable" in info["problem"] and "numerics_class" in info["problem"]


def test_certificates_ignore_keys_a_later_version_adds() -> None:
    cert = Certificate.from_dict({**table_row(), "new_field": 1})
    assert cert.numerics_class == "exact" and Certificate.from_dict(cert.to_dict()) == cert


def test_a_damaged_table_counts_as_empty(tmp_path, caplog) -> None:
    bad = tmp_path / "certificates.json"
    bad.write_text("{not json")
    assert certified_table(bad) == ()
    assert "unreadable" in caplog.text


def test_the_shipped_table_parses() -> None:
    table = certified_table()  # filled by tools/numerics_classes.py on the GPU machine
    assert isinstance(table, tuple) and table


def test_saving_a_loaded_checkpoint_keeps_its_certificate(trained, tmp_path) -> None:
    last, _ = trained
    copy = LibreYOLO(str(last)).save(tmp_path / "copy.pt")
    assert load_checkpoint(copy)["certificate"] == load_checkpoint(last)["certificate"]


@pytest.mark.cuda
def test_a_graphed_training_run_on_a_gpu_certifies_graphed_steps(mini_shapes, tmp_path) -> None:
    options = {**FAST, "epochs": 2, "device": 0, "amp": True}
    LibreYOLO9(size="t").train(data=str(mini_shapes), project=str(tmp_path), cuda_graph=True, **options)
    cert = load_checkpoint(tmp_path / "exp" / "weights" / "last.pt")["certificate"]
    assert cert["graphed"] is True and cert["device"] == "cuda" and cert["dtype"] == "amp-float16"
    assert cert["gpu"] == torch.cuda.get_device_name(0)


def test_a_configuration_certified_diverges_is_trained_eagerly_and_says_why(tmp_path) -> None:
    """A ``diverges`` row (graphed training differed from eager beyond eager's own spread) of any
    size keeps that family, task and precision off graphed training; other precisions are not
    affected."""
    from libreyolo_models.train.graph_forward import divergence_reason

    row = {"family": "yolo9", "size": "s", "task": "detect", "dtype": "float32", "batch": 8, "device": "cuda",
           "torch": "2.11", "cuda": "13.0", "cudnn": "9", "gpu": "NVIDIA H200", "numerics_class": "diverges",
           "graphed": True, "date": "2026-12-05"}
    table = tmp_path / "certificates.json"
    table.write_text(json.dumps([row]))
    model = LibreYOLO9(size="t", nc=3)._model
    reason = divergence_reason(model, "float32", "cuda", table)
    assert reason is not None and "'diverges'" in reason and "NVIDIA H200, 2026-12-05" in reason
    assert divergence_reason(model, "amp-float16", "cuda", table) is None
    assert divergence_reason(model, "float32", "cuda", tmp_path / "absent.json") is None


def test_every_training_capture_declaration_is_backed_by_certificates_in_both_precisions() -> None:
    """A family and task declare ``train_capture`` only on the evidence of a 20-step certificate
    measured on a GPU in fp32 and in AMP (docs/parity-matrix.md); every shipped certificate names a
    registered family and task."""
    from libreyolo_models.zoo import registry

    shipped = {(c.family, c.task, c.dtype) for c in certified_table() if c.device == "cuda"}
    declared = {(spec.name, task) for spec in registry.families().values()
                for task, decl in spec.tasks.items() if decl.train_capture}
    missing = sorted((family, task, dtype) for family, task in declared for dtype in ("float32", "amp-float16")
                     if (family, task, dtype) not in shipped)
    assert not missing, f"train_capture declared without a GPU certificate: {missing}"
    known = {(spec.name, task) for spec in registry.families().values() for task in spec.tasks}
    assert {(family, task) for family, task, _ in shipped} <= known
