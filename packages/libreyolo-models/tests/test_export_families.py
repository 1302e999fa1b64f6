"""Issue 18's export acceptance for every family in the registry, format by format on CPU.

Each (family, format) case exports with ``dynamic=True`` and checks, against the PyTorch model:
the inference seam at batch 1 and 8 (dynamic batch) and, where the family declares
``dynamic_imgsz``, at a second, non-square size; ``predict`` on the sample image and 20 ``shapes``
validation images (same classes, box IoU >= 0.99, scores / probabilities within 1e-3; class maps
on >= 99.9% of pixels); ``val`` on a small slice of the task's ``shapes`` set within 0.005 of
every headline metric. Models are untrained, biases spread (seeded) for detectors,
classifiers and point models so scores spread out and there are detections to compare (their mAP
is near zero: tests-integration/test_export_gpu.py checks the mAP tolerance on a trained YOLOv9).
YOLOv9 is checked in test_export.py, in more depth (fixed-batch chunks, refusals, metadata), not
here. A restoration model predicts on pictures that fit its tile (the PyTorch predictor tiles
larger ones, an exported network runs them whole: compared with the untiled network instead).
Families whose every task declares ``exportable=False`` (Depth Anything V2) need no case; BiRefNet
(ONNX and TorchScript only, its deformable convolutions) has its own file, test_birefnet_export.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from export_checks import assert_same_results
from PIL import Image

from libreyolo_models import SAMPLE_IMAGE, LibreYOLO, families

# family -> (size, imgsz): the smallest of each, at the smallest size its layout accepts
# (RT-DETR selects 300 queries from the encoder tokens: 128 px and up; RF-DETR and the other DETR
# families select as many as there are tokens of a smaller input).
CASES = {"yolo9": ("t", 64), "yolox": ("n", 64), "rtdetr": ("r18", 128), "segformer": ("b0", 64), "rtmdet": ("t", 64),
         "resnet": ("18", 64), "efficientnetv2": ("b0", 64), "convnext": ("tiny", 64), "mobilenetv4": ("small", 64),
         "yolo9_e2e": ("t", 64), "damoyolo": ("ns", 64), "yolo7": ("tiny", 64), "rfdetr": ("n", 64), "ec": ("s", 64),
         "dfine": ("n", 128), "deim": ("n", 128), "rtdetrv4": ("s", 128), "rtdetrv2": ("r18", 128),
         "deimv2": ("atto", 128), "yolonas": ("s", 64), "picodet": ("s", 64), "fomo": ("035", 64), "nafnet": ("t", 256)}
FORMATS = ("onnx", "torchscript", "openvino")
# Over ~10 s on an idle 2-core CPU (export of a big graph, or 21 images at 128 px through a DETR).
SLOW = {"rtdetr", "convnext", "rfdetr", "ec", "dfine", "deim", "rtdetrv4", "rtdetrv2", "deimv2", "nafnet"}
# Families whose network code another case exports in every format (D-FINE's for DEIM and
# RT-DETRv4, RT-DETR's for RT-DETRv2): ONNX only, to keep the suite's time.
ONNX_ONLY = {"deim": "dfine", "rtdetrv4": "dfine", "rtdetrv2": "rtdetr"}
SLOW_FORMATS = {("yolonas", "openvino")}  # YOLO-NAS-s (19M parameters) through OpenVINO's converter: 9-27 s
# Set predictors whose query order follows the encoder's top-k (near ties order freely).
# Families checked in a file of their own (what they export differs: formats, outputs).
ELSEWHERE = {"birefnet": "test_birefnet_export.py"}
QUERY_SETS = {"rtdetr", "rfdetr", "ec", "dfine", "deim", "rtdetrv4", "rtdetrv2", "deimv2"}


def _case(family: str, fmt: str) -> object:
    marks = [pytest.mark.slow] if family in SLOW or (family, fmt) in SLOW_FORMATS else []
    return pytest.param(family, fmt, marks=marks, id=f"{family}-{fmt}")


def test_every_registered_family_has_an_export_case() -> None:
    """A family that lands without a line here fails, so it cannot skip the export check."""
    exportable = {name for name, spec in families().items() if any(t.exportable for t in spec.tasks.values())}
    missing = sorted(exportable - set(CASES) - set(ELSEWHERE))
    assert not missing, f"add export cases (or exportable=False with a reason) for {missing}"
    assert all(t.export_note for name in set(families()) - exportable for t in families()[name].tasks.values())


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Per task a small ``shapes`` set (data.yaml path): 20 detection images to predict on, and
    val slices of 20 / 8 / 8 images for detect / classify (their crops) / semantic."""
    from libreyolo_models.data.shapes import generate_shapes
    from libreyolo_models.tasks.classify.shapes_cls import generate_shapes_cls
    from libreyolo_models.tasks.point.shapes_point import generate_shapes_point
    from libreyolo_models.tasks.restore.shapes_restore import generate_shapes_restore
    from libreyolo_models.tasks.semantic.shapes_seg import generate_shapes_seg

    root = tmp_path_factory.mktemp("export-data")
    generators = (("detect", generate_shapes, 20), ("classify", generate_shapes_cls, 8),
                  ("semantic", generate_shapes_seg, 8), ("point", generate_shapes_point, 8),
                  ("restore", generate_shapes_restore, 8))
    for name, generate, val in generators:
        (root / name).mkdir()
        generate(root / name, split_sizes={"train": 1, "val": val})
    return {name: root / name / "data.yaml" for name, _, _ in generators}


def build(family: str, data: Path) -> LibreYOLO:
    size, imgsz = CASES[family]
    names = yaml.safe_load(data.read_text()).get("names")  # a restoration set has none
    torch.manual_seed(0)
    model = LibreYOLO(family=family, size=size, imgsz=imgsz,
                      names=None if names is None else list(names.values() if isinstance(names, dict) else names)
                      ).eval()
    if model.task not in ("semantic", "restore"):  # SegFormer's own init already predicts several classes
        with torch.no_grad():
            for name, param in model.net.named_parameters():
                if name.endswith("bias"):
                    param.normal_(0.0, 0.5)
    return model


def assert_same_seam(family: str, expected: torch.Tensor, got: torch.Tensor) -> None:
    assert got.shape == expected.shape and got.dtype == expected.dtype
    if not expected.dtype.is_floating_point:  # class maps: an arg-max may flip where two logits tie
        assert (got == expected).float().mean().item() >= 0.999
        return
    tolerance = 1e-4 * max(1.0, expected.abs().max().item())
    if family in QUERY_SETS:
        # Queries come out in the order of the encoder's top-k, which orders near-tied scores of an
        # untrained model freely: compare them as sets (every query has a twin within tolerance).
        for e, g in zip(expected, got, strict=True):
            nearest = torch.cdist(e, g, p=float("inf")).min(1).values
            assert (nearest <= tolerance).float().mean().item() >= 0.98, nearest.max()
    else:
        assert (got - expected).abs().max().item() <= tolerance


@pytest.mark.parametrize(("family", "fmt"), [_case(f, fmt) for fmt in FORMATS for f in CASES
                                             if f != "yolo9"  # YOLOv9: test_export.py, in more depth
                                             and (fmt == "onnx" or f not in ONNX_ONLY)])
def test_export_matches_pytorch(family: str, fmt: str, datasets: dict[str, Path], tmp_path: Path) -> None:
    task = next(iter(families()[family].tasks))
    model = build(family, datasets[task])
    imgsz = model.imgsz
    path = model.export(format=fmt, dynamic=True, file=str(tmp_path / f"{family}.{fmt}"))
    runtime = LibreYOLO(path)
    decl = model.spec.task(model.task)
    assert runtime.info()["dynamic"] and runtime.info()["dynamic_imgsz"] == decl.dynamic_imgsz

    shapes = [(1, imgsz, imgsz), (8, imgsz, imgsz)]
    if decl.dynamic_imgsz:
        shapes.append((2, imgsz + 32, imgsz + 64))
    for batch, h, w in shapes:
        images = torch.rand(batch, 3, h, w, generator=torch.Generator().manual_seed(batch))
        with torch.no_grad():
            tiled = model.task == "restore" and max(h, w) > imgsz  # PyTorch tiles; the export runs it whole
            expected = model.net(images) if tiled else model.inference_forward(images)
        assert_same_seam(family, expected, runtime.inference_forward(images))

    if model.task == "restore":  # the inputs that fit one tile
        sources = [p for p in sorted((datasets[task].parent / "val" / "input").glob("*.png"))
                   if max(Image.open(p).size) <= imgsz]
        assert len(sources) >= 2
    else:
        sources = [SAMPLE_IMAGE, *sorted((datasets["detect"].parent / "images" / "val").glob("*"))]
        assert len(sources) == 21
    ours = model.predict(sources, conf=0.01, batch=8)
    if model.task in ("detect", "point"):
        assert sum(len(r) for r in ours) >= 21, "too few detections to compare anything"
    assert_same_results(ours, runtime.predict(sources, conf=0.01, batch=8))

    options = {"data": str(datasets[task]), "batch": 8, "conf": 0.001, "workers": 0, "verbose": False}
    mine, theirs = model.val(**options).as_dict(), runtime.val(**options).as_dict()
    assert mine.keys() == theirs.keys()
    for key, value in mine.items():
        assert abs(theirs[key] - value) <= 0.005, f"{key}: {theirs[key]:.4f} exported vs {value:.4f} PyTorch"
