"""Target conventions a family's loss and its task's data agree on."""

from __future__ import annotations

IGNORE_INDEX = 255
"""Mask value of unlabelled pixels (semantic masks); class ids must stay below it (at most 255
classes). Those pixels count in neither the loss nor the metrics."""
