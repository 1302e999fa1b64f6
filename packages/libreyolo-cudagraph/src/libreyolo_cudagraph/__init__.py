"""libreyolo-cudagraph."""

from importlib.metadata import version as _version

__version__ = _version("libreyolo-cudagraph")
