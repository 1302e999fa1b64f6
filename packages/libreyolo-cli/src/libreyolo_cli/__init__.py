"""libreyolo-cli: the ``libreyolo`` command (``key=value`` arguments). See ``libreyolo_cli.main``."""

from importlib.metadata import version as _version

__version__ = _version("libreyolo-cli")
