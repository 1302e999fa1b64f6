"""Each package builds into its own wheel with its own metadata and data files (standalone installs)."""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {
    "libreyolo-cudagraph": ("libreyolo_cudagraph/py.typed", {"torch"}),
    "libreyolo-ddp": ("libreyolo_ddp/py.typed", {"torch"}),
    "libreyolo-models": ("libreyolo_models/assets/sample.jpg", {"torch", "libreyolo-cudagraph", "libreyolo-ddp"}),
    "libreyolo-cli": ("libreyolo_cli/main.py", {"libreyolo-models"}),
    "libreyolo": ("libreyolo/__init__.py", {"libreyolo-models", "libreyolo-cli"}),
}


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH")
    out = tmp_path_factory.mktemp("wheels")
    built = {}
    for name in PACKAGES:
        subprocess.run([uv, "build", "--wheel", "--out-dir", str(out), str(ROOT / "packages" / name)],
                       check=True, capture_output=True, timeout=300)
        built[name] = next(out.glob(name.replace("-", "_") + "-*.whl"))
    return built


@pytest.mark.parametrize("name", list(PACKAGES))
def test_wheel_carries_its_files_and_only_its_dependencies(wheels: dict[str, Path], name: str) -> None:
    marker, needs = PACKAGES[name]
    with zipfile.ZipFile(wheels[name]) as whl:
        files = whl.namelist()
        meta = whl.read(next(f for f in files if f.endswith(".dist-info/METADATA"))).decode()
    assert marker in files
    requires = {line.split(":", 1)[1].strip().split(" ")[0].split("=")[0].split(">")[0].split("<")[0]
                for line in meta.splitlines() if line.startswith("Requires-Dist:")}
    assert needs <= requires
    if name in ("libreyolo-cudagraph", "libreyolo-ddp"):
        assert requires == {"torch"}  # graph and DDP packages stand alone: torch only
