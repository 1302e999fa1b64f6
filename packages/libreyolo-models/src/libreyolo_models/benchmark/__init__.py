"""``model.benchmark()`` / ``libreyolo benchmark``: every export format this machine can run,
exported and measured on one dataset (size, latency, accuracy), printed as a table."""

from .runner import BenchmarkResult, BenchmarkRow, available_formats, run_benchmark
from .settings import BenchmarkConfig

__all__ = ["BenchmarkConfig", "BenchmarkResult", "BenchmarkRow", "available_formats", "run_benchmark"]
