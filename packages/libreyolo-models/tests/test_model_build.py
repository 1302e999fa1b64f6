"""Building models: from architecture names and files, family classes, the registry table."""

from __future__ import annotations

from pathlib import Path

import pytest

import libreyolo_models
from libreyolo_models import ConfigError, Family, LibreYOLO, LibreYOLO9, UnknownFamilyError
from libreyolo_models.zoo.registry import BUILTIN, get_family, parse_model_name


def test_architecture_name_builds_an_untrained_model() -> None:
    model = LibreYOLO("LibreYOLO9s.yaml")
    assert isinstance(model, LibreYOLO) and model.spec.name == "yolo9" and model.task == "detect"
    assert (model.size, model.nc, model.imgsz, model.names[0]) == ("s", 80, 640, "person")


def test_architecture_file_sets_classes_and_names(tmp_path: Path) -> None:
    spec = tmp_path / "mine.yaml"
    spec.write_text("family: yolo9\nsize: t\nnames: [cat, dog]\nimgsz: 320\n")
    model = LibreYOLO(spec)
    assert (model.size, model.nc, model.names, model.imgsz) == ("t", 2, {0: "cat", 1: "dog"}, 320)


def test_architecture_file_rejects_unknown_keys(tmp_path: Path) -> None:
    spec = tmp_path / "mine.yaml"
    spec.write_text("family: yolo9\nsize: t\nnmaes: [cat]\n")
    with pytest.raises(ConfigError, match="did you mean 'names'"):
        LibreYOLO(spec)


def test_family_class_with_size_and_classes() -> None:
    model = LibreYOLO9(size="m", nc=5)
    assert (model.size, model.nc, model.names[4]) == ("m", 5, "class4")
    with pytest.raises(ConfigError, match="no size 'x'"):
        LibreYOLO9(size="x")


def test_unknown_names_are_explained() -> None:
    with pytest.raises(UnknownFamilyError, match="cannot tell the model family"):
        LibreYOLO("resnet50.yaml")
    with pytest.raises(ConfigError, match="needs a model"):
        LibreYOLO()


def test_weight_names_parse_like_upstream() -> None:
    parsed = parse_model_name("LibreYOLO9c.pt")
    assert (parsed.family.name, parsed.size, parsed.task) == ("yolo9", "c", "detect")
    assert parsed.family.weight_name("t") == "LibreYOLO9t.pt"


def test_registry_table_lists_exactly_the_family_folders() -> None:
    folder = Path(libreyolo_models.__file__).parent / "families"
    on_disk = {p.name for p in folder.iterdir() if p.is_dir() and (p / "family.py").is_file()}
    assert on_disk == set(BUILTIN)
    for name, spec in BUILTIN.items():
        assert issubclass(spec.family_class(), Family), name  # the spec names its implementation


def test_declarations_are_data() -> None:
    spec = get_family("yolo9")
    assert spec.sizes == ("t", "s", "m", "c") and tuple(spec.tasks) == ("detect",)
    assert spec.default_imgsz("t", "detect") == 640 and spec.stride == 32
    assert spec.task("detect").loss_names == ("box", "cls", "dfl")


def test_family_keyword_builds_any_registered_family() -> None:
    model = LibreYOLO(family="yolo9", size="s", nc=2, imgsz=320)
    assert (model.spec.name, model.size, model.nc, model.imgsz) == ("yolo9", "s", 2, 320)
    with pytest.raises(UnknownFamilyError, match="did you mean 'yolo9'"):
        LibreYOLO(family="yolov9")
    with pytest.raises(ConfigError, match="multiple of 32; use 96 or 128"):
        LibreYOLO(family="yolo9", imgsz=100)
