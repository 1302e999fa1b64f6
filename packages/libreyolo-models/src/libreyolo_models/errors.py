"""Exception classes of the model zoo. Each subclasses the built-in a caller would expect."""

from __future__ import annotations


def abbreviated(text: str, limit: int = 120) -> str:
    """``text`` as an error message quotes it: whole when short, else its ends and its length (a
    5,000-character path would bury the reason)."""
    return text if len(text) <= limit else f"{text[:60]}...{text[-40:]} ({len(text)} characters)"


class LibreYOLOError(Exception):
    """Base of every error this package raises on purpose."""


class ConfigError(LibreYOLOError, ValueError):
    """An option, argument or config file value is wrong (message names it and the fix)."""


class UnknownFamilyError(ConfigError):
    """A model name or family that no registry entry matches."""


class CheckpointError(LibreYOLOError, ValueError):
    """A checkpoint file cannot be used (unreadable, unsafe, or for another model)."""


class WeightsNotFoundError(LibreYOLOError, FileNotFoundError):
    """A weights name resolved nowhere: not local, not in the weights folder, not on the hub."""


class SourceError(LibreYOLOError, ValueError):
    """A prediction input (file, folder, array, tensor) cannot be read."""


class TrainingDivergedError(LibreYOLOError, RuntimeError):
    """Training stopped because its loss or weights became NaN or inf (the message says when,
    what was saved, and what to change)."""


class ModelBusyError(LibreYOLOError, RuntimeError):
    """A model object was asked to do something while it trains (another ``train()``, a predict)."""


class RunFolderBusyError(LibreYOLOError, RuntimeError):
    """A run folder is in use by another live training run (its lock names the process)."""


class MissingExtraError(LibreYOLOError, ImportError):
    """An optional dependency is not installed; the message is the command that installs it."""
