"""The meta-package exposes the user API and pins its siblings to one release."""

from __future__ import annotations

from importlib.metadata import requires, version


def test_user_api_is_importable_from_libreyolo() -> None:
    from libreyolo import SAMPLE_IMAGE, LibreYOLO, Results

    assert SAMPLE_IMAGE.is_file()
    assert callable(LibreYOLO)
    assert Results.__name__ == "Results"


def test_meta_package_pins_every_sibling_to_an_exact_version() -> None:
    everything = requires("libreyolo") or []
    base = [r for r in everything if "extra ==" not in r]
    pins = {r.split("==")[0]: r.split("==")[1] for r in base if "==" in r}
    assert set(pins) == {"libreyolo-cudagraph", "libreyolo-ddp", "libreyolo-models", "libreyolo-cli"}
    for name, pinned in pins.items():
        assert version(name) == pinned
    # Extras (pip install libreyolo[onnx]) pass through to the zoo at the same exact version.
    extras = [r.split(";")[0].strip() for r in everything if "extra ==" in r]
    assert extras and all(r.startswith("libreyolo-models[") and r.endswith(f"=={version('libreyolo-models')}")
                          for r in extras), extras
