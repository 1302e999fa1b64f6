"""libreyolo-cli: the ``libreyolo`` command (``key=value`` arguments). See ``libreyolo_cli.main``."""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

try:
    __version__ = _version("libreyolo-cli")
except PackageNotFoundError:  # run from a source checkout (PYTHONPATH), not installed
    __version__ = "0+source"
