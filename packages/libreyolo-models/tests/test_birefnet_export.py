"""BiRefNet exports to ONNX (its deformable convolutions as ``DeformConv``, opset 19, run by
onnxruntime) and TorchScript: the exported network, predict's alpha and val's metrics match
PyTorch; the formats and opsets it cannot take are refused, naming why."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from libreyolo_models import LibreYOLO
from libreyolo_models.errors import ConfigError
from libreyolo_models.tasks.matte.shapes_matte import generate_shapes_matte

IMGSZ = 64


@pytest.fixture(scope="module")
def model() -> LibreYOLO:
    torch.manual_seed(0)
    return LibreYOLO("LibreBiRefNett.yaml", imgsz=IMGSZ).eval()


@pytest.fixture(scope="module")
def matte_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("matte-export")
    generate_shapes_matte(root, split_sizes={"train": 1, "val": 3})
    return root / "data.yaml"


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
def test_export_matches_pytorch(model: LibreYOLO, matte_data: Path, tmp_path: Path, fmt: str) -> None:
    path = model.export(format=fmt, dynamic=True, file=str(tmp_path / f"birefnet.{fmt}"))
    if fmt == "onnx":
        import onnx

        opsets = {entry.domain: entry.version for entry in onnx.load(str(path)).opset_import}
        nodes = {node.op_type for node in onnx.load(str(path)).graph.node}
        assert opsets[""] == 19 and "DeformConv" in nodes  # raised from 17 for the operator, unasked
    runtime = LibreYOLO(path)
    for batch in (1, 3):  # a dynamic batch
        images = torch.rand(batch, 3, IMGSZ, IMGSZ, generator=torch.Generator().manual_seed(batch))
        with torch.no_grad():
            expected = model.inference_forward(images)
        got = runtime.inference_forward(images)
        assert got.shape == expected.shape and (got - expected).abs().max().item() <= 1e-4
    pictures = sorted((matte_data.parent / "val" / "input").glob("*"))
    for ours, theirs in zip(model.predict(pictures), runtime.predict(pictures), strict=True):
        assert ours.masks is not None and theirs.masks is not None
        gap = np.abs(np.asarray(ours.masks.numpy().data, np.float32) - np.asarray(theirs.masks.numpy().data, np.float32))
        assert gap.max() <= 1e-3
    mine = model.val(data=str(matte_data), batch=2, workers=0, verbose=False).as_dict()
    exported = runtime.val(data=str(matte_data), batch=2, workers=0, verbose=False).as_dict()
    assert mine.keys() == exported.keys()
    assert all(abs(exported[k] - v) <= 0.005 for k, v in mine.items()), (mine, exported)


@pytest.mark.parametrize(("options", "message"), [
    ({"format": "openvino"}, r"BiRefNet exports to 'onnx', 'torchscript' only: its decoder's deformable "
                             r"convolutions .* OpenVINO's ONNX reader"),
    ({"format": "ncnn"}, r"exports to 'onnx', 'torchscript' only"),
    ({"format": "onnx", "opset": 17}, r"export\(opset=17\): BiRefNet needs ONNX opset 19 or later .*pass opset=19"),
    ({"format": "onnx", "int8": True, "data": "shapes-matte"}, r"INT8 is not checked for BiRefNet"),
])
def test_what_it_cannot_export_is_refused(model: LibreYOLO, options: dict, message: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=message):
        model.export(file=str(tmp_path / "x"), **options)
    assert not any(tmp_path.iterdir())  # refused before anything is written
