"""LibreYOLO model zoo: YOLO families, prediction, training, validation and checkpoints.

    from libreyolo_models import LibreYOLO, SAMPLE_IMAGE
    model = LibreYOLO("LibreYOLO9t.yaml")        # untrained YOLOv9-t (or a .pt checkpoint / weights name)
    results = model(SAMPLE_IMAGE, conf=0.25)
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version
from pathlib import Path

try:
    __version__ = _version("libreyolo-models")
except PackageNotFoundError:  # run from a source checkout (PYTHONPATH), not installed
    __version__ = "0+source"

# A small bundled image (package data) to try a model on without finding one.
SAMPLE_IMAGE: Path = Path(__file__).parent / "assets" / "sample.jpg"

from .errors import (  # noqa: E402
    CheckpointError,
    ConfigError,
    LibreYOLOError,
    SourceError,
    UnknownFamilyError,
    WeightsNotFoundError,
)
from .families.yolo9.family import LibreYOLO9  # noqa: E402
from .model import LibreYOLO  # noqa: E402
from .predict.results import Boxes, Results  # noqa: E402

__all__ = [
    "SAMPLE_IMAGE", "Boxes", "CheckpointError", "ConfigError", "LibreYOLO", "LibreYOLO9", "LibreYOLOError",
    "Results", "SourceError", "UnknownFamilyError", "WeightsNotFoundError", "__version__",
]
