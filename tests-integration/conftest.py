"""Fixtures for cross-package tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def mini_shapes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small slice of the bundled ``shapes`` set (its data.yaml path)."""
    from libreyolo_models.data.shapes import generate_shapes

    root = tmp_path_factory.mktemp("mini-shapes")
    generate_shapes(root, split_sizes={"train": 32, "val": 8})
    return root / "data.yaml"


@pytest.fixture(scope="session")
def mini_shapes_cls(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Crops of the first 16 + 8 ``shapes`` images (about 28 + 14 crops): the data.yaml path."""
    from libreyolo_models.tasks.classify.shapes_cls import generate_shapes_cls

    root = tmp_path_factory.mktemp("mini-shapes-cls")
    generate_shapes_cls(root, split_sizes={"train": 16, "val": 8})
    return root / "data.yaml"
