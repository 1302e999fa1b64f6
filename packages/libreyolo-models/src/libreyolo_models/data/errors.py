"""Errors of dataset descriptions and splits (each message names the file, key or split, and the fix)."""

from __future__ import annotations

from ..errors import ConfigError


class DataConfigError(ConfigError):
    """A dataset description is wrong or incomplete: the message names the file, key and fix."""


class EmptySplitError(DataConfigError):
    """A split has no usable images: the message names the split and where it looked."""
