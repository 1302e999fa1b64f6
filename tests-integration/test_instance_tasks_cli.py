"""Segment and pose end to end on the CPU through the ``libreyolo`` command: ``task=`` picks the
task of an architecture; train one tiny epoch on the bundled sets' first images, then validate,
predict with ``--save`` and ``save_txt`` (masks and skeletons drawn, YOLO polygon / keypoint rows)
and inspect the checkpoint (its ``task``, a pose model's ``num_keypoints``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="module")
def tiny_sets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from libreyolo_models.tasks.pose.shapes_pose import ensure_shapes_pose
    from libreyolo_models.tasks.segment.shapes_inst import ensure_shapes_inst

    root = tmp_path_factory.mktemp("tiny-instances")
    sizes = {"train": 4, "val": 2}
    return {"segment": ensure_shapes_inst(root, split_sizes=sizes), "pose": ensure_shapes_pose(root, split_sizes=sizes)}


def test_cli_info_builds_the_task_it_is_given(capsys: pytest.CaptureFixture) -> None:
    from libreyolo_cli.main import main

    assert main(["info", "model=LibreECs.yaml", "task=pose"]) == 0
    out = capsys.readouterr().out
    assert "task: pose" in out and "keypoints: 17" in out


@pytest.mark.slow  # ~30 s a task on a loaded 2-core machine
@pytest.mark.timeout(900)
@pytest.mark.parametrize(("arch", "task", "imgsz"), [("LibreECs.yaml", "segment", 64), ("LibreRFDETRn.yaml", "pose", 64)])
def test_cli_trains_validates_and_predicts_an_instance_task(arch: str, task: str, imgsz: int, tiny_sets: dict[str, Path],
                                                            tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from libreyolo_cli.main import main

    data = tiny_sets[task]
    code = main(["train", f"model={arch}", f"task={task}", f"data={data}", "epochs=1", f"imgsz={imgsz}", "batch=2",
                 "nbs=2", "workers=0", "device=cpu", f"project={tmp_path}", "name=run", "--no-verbose", "--no-plots"])
    assert code == 0, capsys.readouterr().err
    best = tmp_path / "run" / "weights" / "best.pt"
    ckpt = torch.load(best, weights_only=True)
    assert ckpt["task"] == task and (task != "pose" or ckpt["num_keypoints"] == 5)
    header = (tmp_path / "run" / "results.csv").read_text().splitlines()[0].split(",")
    train_terms = [c.removeprefix("train/") for c in header if c.startswith("train/") and c.endswith("_loss")]
    assert train_terms and all(f"val/{term}" in header for term in train_terms), header   # and val losses
    assert main(["val", f"model={best}", f"data={data}", f"imgsz={imgsz}", "workers=0", "--no-verbose"]) == 0
    image = next((Path(data).parent / "images" / "val").glob("*.jpg"))
    assert main(["predict", f"model={best}", f"source={image}", f"imgsz={imgsz}", "conf=0.0", "max_det=2", "--save",
                 "save_txt=True", f"project={tmp_path}", "name=pred"]) == 0
    saved = tmp_path / "pred"
    assert (saved / image.name).is_file()
    rows = (saved / "labels" / f"{image.stem}.txt").read_text().split("\n")
    width = len(rows[0].split())
    assert width == 5 + 5 * 3 if task == "pose" else (width >= 7 and width % 2 == 1)
    out = capsys.readouterr().out
    assert ("mAP50(M)" in out) if task == "segment" else ("mAP50(P)" in out)
