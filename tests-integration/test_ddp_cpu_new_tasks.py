"""The point and restore tasks on two CPU ranks (Gloo): sharded validation equals one process (the
counts and per-image sums add over ranks; the ocr task's line tallies and depth's per-picture
scores too), and FOMO (SyncBatchNorm
on by default) and NAFNet train an epoch through the spawned path."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def task_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from libreyolo_models.tasks.point.shapes_point import generate_shapes_point
    from libreyolo_models.tasks.restore.shapes_restore import generate_shapes_restore

    root = tmp_path_factory.mktemp("ddp-task-data")
    (root / "point").mkdir()
    (root / "restore").mkdir()
    generate_shapes_point(root / "point", split_sizes={"train": 16, "val": 6})
    generate_shapes_restore(root / "restore", split_sizes={"train": 16, "val": 3})
    return {"point": root / "point" / "data.yaml", "restore": root / "restore" / "data.yaml"}


def _weights(folder: Path, name: str) -> str:
    from libreyolo_models import LibreYOLO

    torch.manual_seed(0)
    model = LibreYOLO(name, imgsz=64) if "NAFNet" in name else LibreYOLO(name, nc=5, imgsz=64)
    if model.task == "point":  # spread the head's biases so there are points to count
        with torch.no_grad():
            model.net.head[2].bias.normal_(0.0, 2.0)
    folder.mkdir(parents=True, exist_ok=True)
    return str(model.save(folder / "w.pt"))


@pytest.fixture(scope="module")
def jobs(task_data: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, str]]:
    root = tmp_path_factory.mktemp("ddp-weights")
    return [(_weights(root / "fomo", "LibreFOMO035.yaml"), str(task_data["point"])),
            (_weights(root / "nafnet", "LibreNAFNett.yaml"), str(task_data["restore"]))]


@pytest.fixture(scope="module")
def ocr_job(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """PP-OCR (random weights: boxes everywhere, so there is much to tally) on four printed pictures."""
    pytest.importorskip("cv2")
    from libreyolo_models import LibreYOLO
    from libreyolo_models.tasks.ocr.shapes_ocr import generate_shapes_ocr

    root = tmp_path_factory.mktemp("ddp-ocr")
    generate_shapes_ocr(root, split_sizes={"train": 1, "val": 4})
    torch.manual_seed(0)
    return str(LibreYOLO("LibrePPOCRm.yaml").save(root / "w.pt")), str(root / "data.yaml")


@pytest.fixture(scope="module")
def depth_job(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, str]:
    """Depth Anything V2-s (random weights) on four bundled-style rooms, at 70 px (its patch is 14)."""
    from libreyolo_models import LibreYOLO
    from libreyolo_models.tasks.depth.shapes_depth import generate_shapes_depth

    root = tmp_path_factory.mktemp("ddp-depth")
    generate_shapes_depth(root, split_sizes={"train": 1, "val": 4})
    torch.manual_seed(0)
    return str(LibreYOLO("LibreDepthAnythingV2s.yaml").save(root / "w.pt")), str(root / "data.yaml"), "70"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sharded_validation_equals_single_process(jobs: list[tuple[str, str]], ocr_job: tuple[str, str],
                                                  depth_job: tuple[str, str, str]) -> None:
    from libreyolo_ddp import DevicePlan, spawn

    sys.path.insert(0, str(HERE))
    import ddp_cpu_task_targets

    everything: list[tuple[str, ...]] = [*jobs, ocr_job, depth_job]
    single = ddp_cpu_task_targets.validate_all(everything)
    sharded = spawn(ddp_cpu_task_targets.validate_all, (everything,), devices=DevicePlan.cpu_workers(2),
                    timeout_s=300)
    assert [r["n_images"] for r in single] == [6, 3, 4, 4] and single[0]["metrics/F1"] >= 0
    for one, two in zip(single, sharded, strict=True):
        assert two.keys() == one.keys()
        for key, value in one.items():
            # Counts add exactly over ranks. Per-image errors (MLE, PSNR) are the network's float
            # output, and a CPU kernel may round a batch of 3 differently from a batch of 6 (oneDNN
            # picks its algorithm by shape and CPU), so those agree to float32 rounding, not bits.
            # delta1 is a share of pixels under a ratio threshold: that rounding can carry a pixel
            # across it (CI's CPU flipped one of ~20,000 in one picture: 1.2e-5 of the mean), so
            # it may differ by a few pixels' worth.
            tolerance = 1e-4 if key.endswith("delta1") else 1e-9
            assert two[key] == pytest.approx(value, rel=1e-5, abs=tolerance), key


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_ranks_train_an_epoch(jobs: list[tuple[str, str]], tmp_path: Path) -> None:
    from libreyolo_ddp import DevicePlan, spawn

    sys.path.insert(0, str(HERE))
    import ddp_cpu_task_targets

    results = spawn(ddp_cpu_task_targets.train_all, (jobs, str(tmp_path / "runs")), devices=DevicePlan.cpu_workers(2),
                    timeout_s=400)
    for result, task in zip(results, ("point", "restore"), strict=True):
        ckpt = torch.load(result["best"], weights_only=True)
        assert ckpt["world_size"] == 2 and ckpt["global_batch"] == 8 and ckpt["task"] == task
        assert all(torch.isfinite(v).all() for v in ckpt["model"].values() if v.is_floating_point())
