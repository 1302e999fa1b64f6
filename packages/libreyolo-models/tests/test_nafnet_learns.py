"""Learning works for the restore task: NAFNet-t from scratch on the bundled shapes-restore set, on
the CPU, restores the validation pictures at least 3 dB better than they came (issue 42).

Measured (2026-12-05, the shared 2-core machine at load ~8, one thread): 15 epochs of 64 px crops
(375 optimizer steps at batch 8) took 5.6 min wall (1.2 CPU-min); validation on the 40 whole
pictures (tiled at 64 px) 40 s; PSNR 32.36 dB against the inputs' 28.81 (+3.56 dB), SSIM 0.80
against 0.58. The CI test fits a slice in under a minute.
"""

from __future__ import annotations

import time

import pytest

from libreyolo_models import LibreNAFNet

QUICK = {"data": "shapes-restore", "imgsz": 64, "batch": 8, "nbs": 8, "epochs": 15, "lr0": 2e-3, "workers": 0,
         "device": "cpu", "val": False, "verbose": False, "plots": False}


@pytest.mark.slow
@pytest.mark.learning
@pytest.mark.timeout(3600)
def test_nafnet_t_restores_shapes_restore_3_db_over_its_inputs(tmp_path) -> None:  # noqa: ANN001
    started = time.perf_counter()
    model = LibreNAFNet(size="t")
    outcome = model.train(project=str(tmp_path), **QUICK)
    print(f"trained in {(time.perf_counter() - started) / 60:.1f} min: {outcome.summary()}")
    result = model.val(data="shapes-restore", workers=0, verbose=False)
    print(result.table())
    assert result.psnr_gain >= 3.0 and result.ssim > result.ssim_input, result.summary()


@pytest.mark.slow
@pytest.mark.learning
@pytest.mark.ci
@pytest.mark.timeout(600)
def test_nafnet_t_improves_a_shapes_restore_slice_in_ci_time(tmp_path) -> None:  # noqa: ANN001
    """The restore task's CI learning test: 24 training pairs, 25 epochs of 32 px crops (75 steps
    at batch 8), validated on 4 whole pictures; the restored ones must beat the degraded ones.
    Measured: +0.75 dB (SSIM 0.57 against 0.53) in 66 s beside another training run on the shared
    2-core machine; 18 steps were not enough (-0.6 dB)."""
    from libreyolo_models.tasks.restore.shapes_restore import generate_shapes_restore

    generate_shapes_restore(tmp_path / "data", split_sizes={"train": 24, "val": 4})
    data = str(tmp_path / "data" / "data.yaml")
    model = LibreNAFNet(size="t")
    model.train(data=data, imgsz=32, batch=8, nbs=8, epochs=25, lr0=3e-3, workers=0, device="cpu", val=False,
                verbose=False, plots=False, save=False, project=str(tmp_path / "runs"))
    result = model.val(data=data, workers=0, verbose=False)
    assert result.psnr_gain >= 0.3 and result.ssim > result.ssim_input, result.summary()
