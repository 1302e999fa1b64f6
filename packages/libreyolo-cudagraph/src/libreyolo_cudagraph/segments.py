"""Multi-seam capture: a computation cut into segments, each replayed from a graph or run eagerly.

:class:`~libreyolo_cudagraph.SplitGraphRunner` has one seam (a graphed head, an eager tail).
Some networks need several: an op that cannot be captured, or whose capture is not trusted, sits
in the middle of the network (a deformable convolution inside every decoder block), and
everything between two such ops is plain static-shape tensor work worth a graph. Here the
computation is a sequence of segments; segment ``k`` receives what segment ``k - 1`` returned
(a tuple or list is spread into positional arguments, a single tensor is one argument) and the
first receives the runner's inputs. Graphed segments each get their own :class:`GraphRunner`;
eager ones are called as they are. Both paths call the same segment callables, so the whole
equals all-eager bit for bit whenever every graphed segment's replay does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from .eligibility import GraphMode, check_mode, name_of
from .errors import GraphConfigError
from .info import GraphInfo, RunnerInfo
from .runner import GraphRunner


@dataclass(frozen=True)
class Segment:
    """One piece of a segmented computation.

    Attributes:
        fn: tensors in, a tensor or a tuple/list of tensors out (spread into the next segment).
        graphed: replay it from a CUDA graph (True) or always run it eagerly (False).
        name: for logs and ``info()``; defaults to ``fn``'s name.
    """

    fn: Callable[..., Any]
    graphed: bool
    name: str | None = None


def _as_arguments(value: Any) -> tuple[Any, ...]:
    """What the next segment is called with: a tuple/list spread, anything else as one argument."""
    return tuple(value) if isinstance(value, tuple | list) else (value,)


class SegmentedGraphRunner:
    """``runner(*x)`` == the segments applied in order, graphed ones replayed from CUDA graphs.

    Every graphed segment has its own :class:`GraphRunner` (its own cache, pool, fallbacks and
    storage watch), built with ``runner_kwargs`` (``mode``, ``max_graphs``, ``evict``,
    ``copy_outputs``, ``warmup_iters``, ``watch``). Keep ``copy_outputs=True`` (the default)
    unless no eager segment keeps a view of a graph's output: a later replay overwrites it.

    Args:
        segments: at least one; the first receives the runner's inputs.
        name: prefix of the per-segment runner names.
        make_runner: builds a graphed segment's runner (tests pass a CPU emulation).
        **runner_kwargs: passed to every graphed segment's runner.
    """

    def __init__(self, segments: Sequence[Segment], *, name: str | None = None,
                 make_runner: Callable[..., GraphRunner] = GraphRunner, **runner_kwargs: Any) -> None:
        if not segments:
            raise GraphConfigError("SegmentedGraphRunner(segments=[]): give at least one segment")
        for i, segment in enumerate(segments):
            if not isinstance(segment, Segment) or not callable(segment.fn):
                raise GraphConfigError(f"SegmentedGraphRunner: segment {i} is {segment!r}; pass "
                                       "Segment(fn=<callable>, graphed=<bool>) objects")
        self.name = name or "segments"
        self._mode: GraphMode = check_mode(runner_kwargs.pop("mode", "on"), f"{self.name}(mode=...)")
        self.segments = tuple(segments)
        self.runners: list[GraphRunner | None] = [
            make_runner(s.fn, mode=self._mode, name=f"{self.name}[{i}:{s.name or name_of(s.fn)}]", **runner_kwargs)
            if s.graphed else None
            for i, s in enumerate(self.segments)
        ]
        self.eager_calls = 0  # calls of eager segments (each segment call counts once)

    def __call__(self, *inputs: Tensor) -> Any:
        """Run the segments in order: graphed ones through their runners, eager ones directly."""
        value: Any = inputs
        for segment, runner in zip(self.segments, self.runners):
            arguments = _as_arguments(value)
            if runner is None:
                self.eager_calls += 1
                value = segment.fn(*arguments)
            else:
                value = runner(*arguments)
        return value

    @property
    def graphed_runners(self) -> list[GraphRunner]:
        """The runners of the graphed segments, in order."""
        return [r for r in self.runners if r is not None]

    @property
    def mode(self) -> GraphMode:
        """``"off"``, ``"on"`` or ``"auto"`` for every graphed segment; assignable."""
        return self._mode

    @mode.setter
    def mode(self, value: GraphMode) -> None:
        self._mode = check_mode(value, f"{self.name}.mode")
        for runner in self.graphed_runners:
            runner.mode = self._mode

    @property
    def watch(self) -> nn.Module | None:
        """The module the graphed segments fingerprint (the first runner's)."""
        runners = self.graphed_runners
        return runners[0].watch if runners else None

    def capture(self, *example_inputs: Tensor) -> GraphInfo:
        """Capture every graphed segment for ``example_inputs`` now, running the eager segments
        between them to get each one's inputs. Returns the first graphed segment's info (the
        per-segment ones are in :meth:`segment_infos`)."""
        value: Any = example_inputs
        first: GraphInfo | None = None
        for segment, runner in zip(self.segments, self.runners):
            arguments = _as_arguments(value)
            if runner is None:
                value = segment.fn(*arguments)
                continue
            info = runner.capture(*arguments)
            first = first or info
            value = runner(*arguments)
        if first is None:
            raise GraphConfigError(f"{self.name}: no segment is graphed, so there is nothing to capture")
        return first

    def segment_infos(self) -> list[RunnerInfo]:
        """Each graphed segment's runner info, in order."""
        return [r.info() for r in self.graphed_runners]

    def info(self) -> RunnerInfo:
        """One summary over the graphed segments: their graphs in segment order, fallbacks keyed
        ``"<segment>: <reason>"``, eager calls of graphed segments plus the eager segments' calls."""
        infos = self.segment_infos()
        fallbacks = {f"{i.name}: {reason}": n for i in infos for reason, n in i.fallbacks.items()}
        evicted = tuple(e for i in infos for e in i.evicted)[-16:]
        last = next((i.last_invalidation for i in reversed(infos) if i.last_invalidation), None)
        return RunnerInfo(name=self.name, mode=self._mode, graphs=tuple(g for i in infos for g in i.graphs),
                          fallbacks=fallbacks, eager_calls=sum(i.eager_calls for i in infos) + self.eager_calls,
                          evictions=sum(i.evictions for i in infos), evicted=evicted,
                          invalidations=max((i.invalidations for i in infos), default=0), last_invalidation=last)

    def invalidate(self, reason: str) -> None:
        """Drop every segment's graphs (see :meth:`GraphRunner.invalidate`)."""
        for runner in self.graphed_runners:
            runner.invalidate(reason)

    def release(self) -> None:
        """Free every segment's graphs and memory pool (see :meth:`GraphRunner.release`)."""
        for runner in self.graphed_runners:
            runner.release()

    def __repr__(self) -> str:
        kinds = "".join("G" if r is not None else "e" for r in self.runners)
        return f"SegmentedGraphRunner({self.name!r}, mode={self._mode!r}, segments={kinds!r})"
