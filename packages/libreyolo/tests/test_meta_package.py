"""The meta-package exposes the user API and pins its siblings to one release."""

from __future__ import annotations

from importlib.metadata import requires, version


def test_user_api_is_importable_from_libreyolo() -> None:
    from libreyolo import SAMPLE_IMAGE, LibreYOLO, Results

    assert SAMPLE_IMAGE.is_file()
    assert callable(LibreYOLO)
    assert Results.__name__ == "Results"


def test_meta_package_pins_every_sibling_to_an_exact_version() -> None:
    pins = {r.split("==")[0]: r.split("==")[1] for r in requires("libreyolo") or [] if "==" in r}
    assert set(pins) == {"libreyolo-cudagraph", "libreyolo-ddp", "libreyolo-models", "libreyolo-cli"}
    for name, pinned in pins.items():
        assert version(name) == pinned
