"""LibreYOLO: YOLO-family detectors with CUDA graph capture and one-argument multi-GPU training.

This meta-package only re-exports; the code lives in ``libreyolo_models`` (the zoo),
``libreyolo_cudagraph`` (graph capture for any module), ``libreyolo_ddp`` (multi-GPU launch for
any training function) and ``libreyolo_cli`` (the ``libreyolo`` command).

    from libreyolo import LibreYOLO, SAMPLE_IMAGE
    model = LibreYOLO("LibreYOLO9t.yaml")
    model.train(data="shapes", epochs=10, imgsz=256)
    results = model(SAMPLE_IMAGE)
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

from libreyolo_models import (
    SAMPLE_IMAGE,
    Boxes,
    CheckpointError,
    ConfigError,
    LibreYOLO,
    LibreYOLO9,
    LibreYOLOError,
    Probs,
    Results,
    SourceError,
    UnknownFamilyError,
    WeightsNotFoundError,
)

try:
    __version__ = _version("libreyolo")
except PackageNotFoundError:  # run from a source checkout (PYTHONPATH), not installed
    __version__ = "0+source"

__all__ = [
    "SAMPLE_IMAGE", "Boxes", "CheckpointError", "ConfigError", "LibreYOLO", "LibreYOLO9", "LibreYOLOError", "Probs",
    "Results", "SourceError", "UnknownFamilyError", "WeightsNotFoundError", "__version__",
]
