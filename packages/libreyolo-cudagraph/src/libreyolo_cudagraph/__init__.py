"""libreyolo-cudagraph: CUDA graph capture for any ``nn.Module``, bit-identical to eager.

Three layers, each usable alone:

- capture primitives: :data:`capture_lock`, :func:`thread_local_graphs`,
  :func:`graphed_callables`, :func:`preserved_state`;
- runners: :class:`GraphRunner` (inference), :class:`SplitGraphRunner` (graph a prefix, run
  the tail eagerly), :class:`SegmentedGraphRunner` (graphed and eager segments in turn), :class:`GraphedTraining` (forward+backward once a shape repeats);
- parity: :func:`verify_parity`, :func:`certify_in_subprocess`, :func:`compare_train_step`,
  :func:`compare_training_runs` (N steps, classed against eager's own noise).

This package depends on torch only and knows nothing about any model zoo.
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

from .capture import (
    CaptureLock,
    capture_lock,
    check_autocast_cache,
    graphed_callables,
    make_graphed_callables_accepts_mode,
    thread_local_graphs,
)
from .certify import certify_in_subprocess
from .compare import bitwise_equal, max_abs_diff, max_ulp_distance
from .eligibility import GraphMode
from .errors import (
    AutocastCacheError,
    CaptureError,
    CudaGraphError,
    GraphConfigError,
    GraphInputError,
    NestedCaptureError,
    ParityError,
    StaleGraphError,
)
from .info import GraphInfo, RunnerInfo, TrainingInfo
from .parity import LeafResult, ParityReport, contrasting_probes, verify_parity, verify_segmented
from .runner import GraphRunner
from .segments import Segment, SegmentedGraphRunner
from .split import SplitGraphRunner
from .state import preserved_state
from .train_numerics import NumericsClass, NumericsReport, compare_training_runs
from .train_parity import TensorVerdict, TrainParityReport, compare_train_step
from .training import GraphedTraining

try:
    __version__ = _version("libreyolo-cudagraph")
except PackageNotFoundError:  # run from a source checkout (PYTHONPATH), not installed
    __version__ = "0+source"

__all__ = [
    "AutocastCacheError",
    "CaptureError",
    "CaptureLock",
    "CudaGraphError",
    "GraphConfigError",
    "GraphInfo",
    "GraphInputError",
    "GraphMode",
    "GraphRunner",
    "GraphedTraining",
    "LeafResult",
    "NestedCaptureError",
    "NumericsClass",
    "NumericsReport",
    "ParityError",
    "ParityReport",
    "RunnerInfo",
    "Segment",
    "SegmentedGraphRunner",
    "SplitGraphRunner",
    "StaleGraphError",
    "TensorVerdict",
    "TrainParityReport",
    "TrainingInfo",
    "bitwise_equal",
    "capture_lock",
    "certify_in_subprocess",
    "check_autocast_cache",
    "compare_train_step",
    "compare_training_runs",
    "contrasting_probes",
    "graphed_callables",
    "make_graphed_callables_accepts_mode",
    "max_abs_diff",
    "max_ulp_distance",
    "preserved_state",
    "thread_local_graphs",
    "verify_parity",
    "verify_segmented",
]
