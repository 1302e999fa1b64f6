"""The installed version of libreyolo-models, in one place (the package and checkpoints read it)."""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

try:
    __version__ = _version("libreyolo-models")
except PackageNotFoundError:  # run from a source checkout (PYTHONPATH), not installed
    __version__ = "0+source"
