"""Exceptions raised by libreyolo-cudagraph.

Every class subclasses :class:`CudaGraphError` (a ``RuntimeError``), so a caller can catch the
whole package with one clause. Fallbacks to eager never raise; these are for explicit requests
(``capture()``, ``raise_if_failed()``) and for misuse that would otherwise give wrong numbers.
"""

from __future__ import annotations


class CudaGraphError(RuntimeError):
    """Base class of every error this package raises."""


class GraphConfigError(CudaGraphError, ValueError):
    """A constructor argument or setting has a value the package cannot use."""


class GraphInputError(CudaGraphError, TypeError):
    """A runner was called with something other than tensors."""


class NestedCaptureError(CudaGraphError):
    """A capture was requested while this thread already holds the process-wide capture lock."""


class AutocastCacheError(CudaGraphError):
    """Autocast's weight-cast cache is on; a graph would bake the cached casts in."""


class CaptureError(CudaGraphError):
    """An explicitly requested capture could not be made (the reason is in the message)."""


class StaleGraphError(CudaGraphError):
    """A backward pass reached graph buffers that a later graphed forward had already reused."""


class ParityError(CudaGraphError):
    """A parity check found graphed results that differ from eager."""
