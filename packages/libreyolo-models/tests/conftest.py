"""Fixtures shared by the model-zoo tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def mini_shapes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 24 + 8 image slice of the bundled ``shapes`` set (its data.yaml path): seconds to train on."""
    from libreyolo_models.data.shapes import generate_shapes

    root = tmp_path_factory.mktemp("mini-shapes")
    generate_shapes(root, split_sizes={"train": 24, "val": 8})
    return root / "data.yaml"


@pytest.fixture(scope="session")
def micro_shapes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four training and two validation images of ``shapes`` (data.yaml path): one short epoch."""
    from libreyolo_models.data.shapes import generate_shapes

    root = tmp_path_factory.mktemp("micro-shapes")
    generate_shapes(root, split_sizes={"train": 4, "val": 2})
    return root / "data.yaml"


@pytest.fixture(scope="session")
def mini_shapes_cls(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Crops of the first 16 + 8 ``shapes`` images (about 28 + 14 crops): the data.yaml path."""
    from libreyolo_models.tasks.classify.shapes_cls import generate_shapes_cls

    root = tmp_path_factory.mktemp("mini-shapes-cls")
    generate_shapes_cls(root, split_sizes={"train": 16, "val": 8})
    return root / "data.yaml"

# Test helper modules beside this file (``upstream_fill``) import by name.
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def open_source_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, object]]:
    """The keyword arguments of every ``open_source`` call predict makes (the call still happens):
    what predict asked its source for (planar video, the host resize)."""
    from libreyolo_models.predict import predictor

    calls: list[dict[str, object]] = []
    real_open = predictor.open_source

    def recording(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(kwargs)
        return real_open(*args, **kwargs)

    monkeypatch.setattr(predictor, "open_source", recording)
    return calls
