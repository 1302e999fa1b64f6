"""LibreYOLO: YOLO-family models with CUDA graph capture and one-argument multi-GPU training.

This meta-package only re-exports; the code lives in ``libreyolo_models`` (the zoo),
``libreyolo_cudagraph`` (graph capture for any module), ``libreyolo_ddp`` (multi-GPU launch for
any training function) and ``libreyolo_cli`` (the ``libreyolo`` command). Everything in
``libreyolo_models.__all__`` is available here under the same name, so the two never drift.

    from libreyolo import LibreYOLO, SAMPLE_IMAGE
    model = LibreYOLO("LibreYOLO9t.yaml")
    model.train(data="shapes", epochs=10, imgsz=256)
    results = model(SAMPLE_IMAGE)
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

from libreyolo_models import *  # noqa: F403 - the zoo's public API, re-exported as it is
from libreyolo_models import __all__ as _ZOO_API

try:
    __version__ = _version("libreyolo")
except PackageNotFoundError:  # run from a source checkout (PYTHONPATH), not installed
    __version__ = "0+source"

__all__ = [*(name for name in _ZOO_API if name != "__version__"), "__version__"]
