"""YOLOv7's layout against the official checkpoints' key names and shapes (WongKinYiu/yolov7,
training configs): the derived manifests of every size (``data/yolo7/``, see its SOURCE.md), two
parameter counts users reported from the official code, and each official graph's weight-free
layers and routes, typed in from the official YAML files. No numeric vectors exist for YOLOv7."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from upstream_fill import layout_rows

from libreyolo_models.families.yolo7.family import Yolo7Family
from libreyolo_models.families.yolo7.nn import Yolo7Net

DATA = Path(__file__).parent / "data" / "yolo7"

# Layers without weights (max-pools, concatenations, upsampling) in cfg/training/*.yaml.
WEIGHT_FREE = {
    "tiny": (6, 8, 13, 15, 20, 22, 27, 31, 32, 33, 34, 36, 39, 41, 46, 49, 51, 56, 59, 64, 67, 72),
    "base": (10, 12, 16, 23, 25, 29, 36, 38, 42, 49, 53, 55, 62, 65, 67, 74, 76, 80, 87, 89, 93, 100),
    "x": (12, 14, 18, 27, 29, 33, 42, 44, 48, 57, 61, 63, 72, 75, 77, 86, 88, 92, 101, 103, 107, 116),
}
# Layers that read something other than the layer before them: layer -> the layers it reads.
ROUTES = {
    "tiny": {3: (1,), 6: (5, 4, 3, 2), 10: (8,), 13: (12, 11, 10, 9), 17: (15,), 20: (19, 18, 17, 16), 24: (22,),
             27: (26, 25, 24, 23), 30: (28,), 32: (30,), 33: (30,), 34: (33, 32, 31, 30), 36: (35, 29), 40: (21,),
             41: (40, 39), 43: (41,), 46: (45, 44, 43, 42), 50: (14,), 51: (50, 49), 53: (51,), 56: (55, 54, 53, 52),
             59: (58, 47), 61: (59,), 64: (63, 62, 61, 60), 67: (66, 37), 69: (67,), 72: (71, 70, 69, 68), 74: (57,),
             75: (65,), 76: (73,)},
    "base": {5: (3,), 10: (9, 7, 5, 4), 14: (11,), 16: (15, 13), 18: (16,), 23: (22, 20, 18, 17), 27: (24,),
             29: (28, 26), 31: (29,), 36: (35, 33, 31, 30), 40: (37,), 42: (41, 39), 44: (42,), 49: (48, 46, 44, 43),
             54: (37,), 55: (54, 53), 57: (55,), 62: (61, 60, 59, 58, 57, 56), 66: (24,), 67: (66, 65), 69: (67,),
             74: (73, 72, 71, 70, 69, 68), 78: (75,), 80: (79, 77, 63), 82: (80,), 87: (86, 85, 84, 83, 82, 81),
             91: (88,), 93: (92, 90, 51), 95: (93,), 100: (99, 98, 97, 96, 95, 94), 102: (75,), 103: (88,), 104: (101,)},
    "x": {5: (3,), 12: (11, 9, 7, 5, 4), 16: (13,), 18: (17, 15), 20: (18,), 27: (26, 24, 22, 20, 19), 31: (28,),
          33: (32, 30), 35: (33,), 42: (41, 39, 37, 35, 34), 46: (43,), 48: (47, 45), 50: (48,), 57: (56, 54, 52, 50, 49),
          62: (43,), 63: (62, 61), 65: (63,), 72: (71, 69, 67, 65, 64), 76: (28,), 77: (76, 75), 79: (77,),
          86: (85, 83, 81, 79, 78), 90: (87,), 92: (91, 89, 73), 94: (92,), 101: (100, 98, 96, 94, 93), 105: (102,),
          107: (106, 104, 59), 109: (107,), 116: (115, 113, 111, 109, 108), 118: (87,), 119: (102,), 120: (117,)},
}
DETECT = {"tiny": 77, "base": 105, "x": 121}


def _manifest(size: str) -> tuple[dict[str, int], list[tuple[str, ...]]]:
    lines = (DATA / f"manifest-yolo7-{size}.tsv").read_text().splitlines()
    header = {k: int(v) for k, v in (tok.split("=") for tok in lines[0].split() if "=" in tok)}
    return header, [tuple(line.split("\t")) for line in lines[1:]]


def _meta(size: str, nc: int = 80) -> Yolo7Net:
    with torch.device("meta"):
        return Yolo7Net(size, nc)


@pytest.mark.parametrize("size", ["tiny", "base", "x"])
def test_state_dict_layout_matches_the_derived_manifest(size: str) -> None:
    header, rows = _manifest(size)
    model = _meta(size)
    assert layout_rows(model) == rows
    assert sum(p.numel() for p in model.parameters()) == header["params"]


def test_parameter_counts_match_what_the_official_code_reports() -> None:
    """Issue #504 (cfg/deploy/yolov7.yaml, nc=80): 37,620,125 = ours minus the 2,557 implicit
    parameters (deploy folds them away); issue #1085 (cfg/training/yolov7.yaml, nc=16): 37,277,466."""
    implicit = (256 + 512 + 1024) + 3 * 255
    assert sum(p.numel() for p in _meta("base").parameters()) - implicit == 37_620_125
    assert sum(p.numel() for p in _meta("base", nc=16).parameters()) == 37_277_466


@pytest.mark.parametrize("size", ["tiny", "base", "x"])
def test_layer_numbering_routes_and_weight_free_layers_are_the_official_graphs(size: str) -> None:
    model = _meta(size)
    assert len(model.model) == DETECT[size] + 1
    owners = {int(k.split(".")[1]) for k in model.state_dict()}
    assert owners == set(range(DETECT[size] + 1)) - set(WEIGHT_FREE[size])
    routes = {i: srcs for i, srcs in enumerate(model._sources) if srcs not in ((i - 1,), (-1,))}
    assert routes == ROUTES[size]


def test_detect_layer_keys_are_the_idetect_ones_in_order() -> None:
    keys = [k for k in _meta("tiny").state_dict() if k.startswith("model.77.")]
    assert keys[:2] == ["model.77.anchors", "model.77.anchor_grid"]
    assert keys[2:] == ([f"model.77.m.{i}.{p}" for i in range(3) for p in ("weight", "bias")]
                        + [f"model.77.ia.{i}.implicit" for i in range(3)] + [f"model.77.im.{i}.implicit" for i in range(3)])


def test_anchor_buffers_hold_grid_units_and_pixels() -> None:
    head = Yolo7Net("tiny", 3).detect
    torch.testing.assert_close(head.anchors[0, 0], torch.tensor([10 / 8, 13 / 8]))
    torch.testing.assert_close(head.anchor_grid[2, 0, 2, 0, 0], torch.tensor([373.0, 326.0]))


@pytest.mark.parametrize("size", ["tiny", "base", "x"])
def test_bare_state_dict_tells_size_and_classes(size: str) -> None:
    state = _meta(size, nc=7).state_dict()
    assert Yolo7Family.infer_size(state, "detect") == size
    assert Yolo7Family.infer_nc(state, "detect") == 7


def test_a_deploy_layout_file_gets_neutral_implicit_layers_and_predicts_the_same() -> None:
    """cfg/deploy's ``Detect`` has no ``ia``/``im``: ``remap_state`` adds ``ia = 0`` and ``im = 1``."""
    torch.manual_seed(0)
    trained = Yolo7Net("tiny", 2).eval()
    with torch.no_grad():
        for ia, im in zip(trained.detect.ia, trained.detect.im):
            ia.implicit.zero_()
            im.implicit.fill_(1.0)
    deploy = {k: v for k, v in trained.state_dict().items() if ".ia." not in k and ".im." not in k}
    remapped = Yolo7Family.remap_state(deploy)
    assert list(remapped) == list(deploy) + [k for k in trained.state_dict() if ".ia." in k or ".im." in k]
    again = Yolo7Net("tiny", 2).eval()
    again.load_state_dict(remapped)
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(again(x)["predictions"], trained(x)["predictions"])
