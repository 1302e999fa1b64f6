"""LibreYOLO model zoo: families, tasks, prediction, training, validation and checkpoints.

    from libreyolo_models import LibreYOLO, SAMPLE_IMAGE
    model = LibreYOLO("LibreYOLO9t.yaml")        # untrained YOLOv9-t (or a .pt checkpoint / weights name)
    results = model(SAMPLE_IMAGE, conf=0.25)
"""

from pathlib import Path

from .version import __version__

# A small bundled image (package data) to try a model on without finding one.
SAMPLE_IMAGE: Path = Path(__file__).parent / "assets" / "sample.jpg"

from .contract import Family, LossContext, LossResult  # noqa: E402
from .errors import (  # noqa: E402
    CheckpointError,
    ConfigError,
    LibreYOLOError,
    SourceError,
    UnknownFamilyError,
    WeightsNotFoundError,
)
from .facade import LibreYOLO  # noqa: E402
from .family_spec import FamilySpec, TaskDecl, WeightsEntry  # noqa: E402
from .named import (  # noqa: E402
    LibreConvNeXt,
    LibreEfficientNetV2,
    LibreMobileNetV4,
    LibrePICODET,
    LibreResNet,
    LibreRTDETR,
    LibreRTMDet,
    LibreSegFormer,
    LibreYOLO9,
    LibreYOLONAS,
    LibreYOLOX,
)
from .predict.probs import Probs  # noqa: E402
from .predict.results import Boxes, Results  # noqa: E402
from .registry import families, register_family, unregister_family  # noqa: E402

__all__ = [
    "SAMPLE_IMAGE", "Boxes", "CheckpointError", "ConfigError", "Family", "FamilySpec", "LibreConvNeXt", "LibreEfficientNetV2",
    "LibreMobileNetV4", "LibrePICODET", "LibreRTDETR", "LibreRTMDet", "LibreResNet", "LibreSegFormer", "LibreYOLO",
    "LibreYOLO9", "LibreYOLONAS", "LibreYOLOX",
    "LibreYOLOError", "LossContext", "LossResult", "Probs", "Results", "SourceError", "TaskDecl", "UnknownFamilyError",
    "WeightsEntry", "WeightsNotFoundError", "__version__", "families", "register_family", "unregister_family",
]
