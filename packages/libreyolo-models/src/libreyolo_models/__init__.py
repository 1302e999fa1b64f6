"""LibreYOLO model zoo: families, tasks, prediction, training, validation and checkpoints.

    from libreyolo_models import LibreYOLO, SAMPLE_IMAGE
    model = LibreYOLO("LibreYOLO9t.yaml")        # untrained YOLOv9-t (or a .pt checkpoint / weights name)
    results = model(SAMPLE_IMAGE, conf=0.25)
"""

from collections.abc import Callable
from pathlib import Path

from .version import __version__

# A small bundled image (package data) to try a model on without finding one.
SAMPLE_IMAGE: Path = Path(__file__).parent / "assets" / "sample.jpg"

from .contract.classifier import ClassifierFamily  # noqa: E402
from .contract.detector import DetectorFamily  # noqa: E402
from .contract.family import Family, LossContext, LossResult  # noqa: E402
from .contract.spec import FamilySpec, TaskDecl, WeightsEntry  # noqa: E402
from .errors import (  # noqa: E402
    CheckpointError,
    ConfigError,
    LibreYOLOError,
    SourceError,
    UnknownFamilyError,
    WeightsNotFoundError,
)
from .facade import LibreYOLO  # noqa: E402
from .tasks import register_task, unregister_task  # noqa: E402
from .tasks.classify.probs import Probs  # noqa: E402
from .tasks.results import Boxes, Results  # noqa: E402
from .zoo.registry import BUILTIN, families, register_family, unregister_family  # noqa: E402


def __getattr__(name: str) -> Callable[..., LibreYOLO]:
    """Per-family shortcuts (``LibreYOLO9``, ``LibreRTDETR``, ...), made from the registry on first
    use: one per family, named by its weight prefix (``named.py``)."""
    from .named import shortcut

    return shortcut(name)


__all__ = [
    "SAMPLE_IMAGE", "Boxes", "CheckpointError", "ClassifierFamily", "ConfigError", "DetectorFamily", "Family", "FamilySpec", "LibreYOLO", "LibreYOLOError",
    "LossContext", "LossResult", "Probs", "Results", "SourceError", "TaskDecl", "UnknownFamilyError", "WeightsEntry",
    "WeightsNotFoundError", "__version__", "families", "register_family", "register_task", "unregister_family",
    "unregister_task", *(spec.weight_prefix for spec in BUILTIN.values()),
]
