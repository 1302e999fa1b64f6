"""Inference parity: does replaying a graph give exactly what eager gives?

Checked on two probes from contrasting distributions (A uniform in [0, 1), B normal with
scale 3 and an offset), in the order A, B, A:

- every replay equals eager on the same probe, bit for bit (or within ``atol``);
- at least one output differs between the probes, else the comparison proves nothing (a
  constant output would "pass" even with a graph that ignores its input);
- the last replay of A differs from eager of B: a stale graph (static input not refreshed,
  outputs read before the replay finished) would hand back B's result.

Each run starts from the same module state (buffers and RNG restored), so modules that mutate
state in forward are compared fairly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor, nn

from .compare import bitwise_equal, max_abs_diff
from .errors import ParityError
from .runner import GraphRunner
from .segments import SegmentedGraphRunner
from .state import preserved_state
from .tree import flatten, leaf_paths


@dataclass(frozen=True)
class LeafResult:
    """Parity of one output tensor, named by its path in the output (``out['boxes']``)."""

    path: str
    shape: tuple[int, ...]
    dtype: str
    replay_a_equal: bool
    replay_b_equal: bool
    probes_differ: bool
    stale: bool
    max_abs_diff_a: float
    max_abs_diff_b: float

    @property
    def ok(self) -> bool:
        """Both replays matched eager and the last replay of A was not B's result."""
        return self.replay_a_equal and self.replay_b_equal and not self.stale

    def problems(self) -> list[str]:
        """Readable reasons this leaf failed (empty when it passed)."""
        found = []
        if not self.replay_a_equal:
            found.append(f"{self.path}: replay(A) != eager(A) (max |diff| {self.max_abs_diff_a:.3g})")
        if not self.replay_b_equal:
            found.append(f"{self.path}: replay(B) != eager(B) (max |diff| {self.max_abs_diff_b:.3g})")
        if self.stale:
            found.append(f"{self.path}: stale graph: replay(A) after B returned eager(B)")
        return found


@dataclass(frozen=True)
class ParityReport:
    """Result of :func:`verify_parity` (or of a certification run in a subprocess).

    Attributes:
        name: what was checked.
        graphed: whether a graph was captured and served every graphed call.
        leaves: per output tensor results.
        signature: the captured signature (readable), when graphed.
        reason: why nothing was graphed, or why the certification run failed.
        atol: tolerance used (0.0 means bitwise).
    """

    name: str
    graphed: bool
    leaves: tuple[LeafResult, ...] = ()
    signature: str | None = None
    reason: str | None = None
    atol: float = 0.0

    @property
    def probes_differ(self) -> bool:
        """At least one output differs between probe A and probe B."""
        return any(leaf.probes_differ for leaf in self.leaves)

    @property
    def ok(self) -> bool:
        """Graphed, at least one output, every output matched, and the probes told apart."""
        return (
            self.graphed and bool(self.leaves) and self.probes_differ and all(leaf.ok for leaf in self.leaves)
        )

    def failures(self) -> list[str]:
        """Every reason the report is not ok, one line each."""
        if not self.graphed:
            return [f"not graphed: {self.reason or 'unknown reason'}"]
        found = [p for leaf in self.leaves for p in leaf.problems()]
        if not self.leaves:
            found.append("no tensor outputs to compare")
        elif not self.probes_differ:
            found.append("no output differs between probes A and B, so the check proves nothing")
        return found

    def summary(self) -> str:
        """A readable verdict: one line when it passed, the failures listed when not."""
        how = "bit-identical" if self.atol == 0 else f"within atol={self.atol:g}"
        if self.ok:
            return f"{self.name}: PASS: {len(self.leaves)} output(s) {how} to eager on probes A and B ({self.signature})"
        lines = [f"{self.name}: FAIL ({self.signature or 'no graph'})"]
        lines += [f"  - {problem}" for problem in self.failures()]
        return "\n".join(lines)

    def raise_if_failed(self) -> None:
        """Raise :class:`ParityError` with the summary unless the report is ok."""
        if not self.ok:
            raise ParityError(self.summary())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (used to bring a report back from a subprocess)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ParityReport:
        """Inverse of :meth:`to_dict`."""
        leaves = tuple(
            LeafResult(**{**leaf, "shape": tuple(leaf["shape"])}) for leaf in data.get("leaves", ())
        )
        return cls(
            name=data["name"],
            graphed=data["graphed"],
            leaves=leaves,
            signature=data.get("signature"),
            reason=data.get("reason"),
            atol=data.get("atol", 0.0),
        )


def contrasting_probes(
    shape: Sequence[int], dtype: torch.dtype = torch.float32, device: str | torch.device = "cuda"
) -> tuple[tuple[Tensor], tuple[Tensor]]:
    """Two one-tensor probes: A uniform in [0, 1), B ``3 * normal + 1``; same on every device.

    Drawn on the CPU from fixed seeds, then moved, so a probe is reproducible across machines.
    """
    gen_a = torch.Generator().manual_seed(0)
    gen_b = torch.Generator().manual_seed(1)
    probe_a = torch.rand(tuple(shape), generator=gen_a, dtype=torch.float64)
    probe_b = torch.randn(tuple(shape), generator=gen_b, dtype=torch.float64) * 3.0 + 1.0
    return (probe_a.to(device, dtype),), (probe_b.to(device, dtype),)


def verify_parity(
    fn: Callable[..., Any],
    probe_a: Sequence[Tensor],
    probe_b: Sequence[Tensor],
    *,
    watch: nn.Module | None = None,
    atol: float = 0.0,
    name: str | None = None,
) -> ParityReport:
    """Capture ``fn``, replay it on two probes and compare every output with eager.

    Runs under the caller's autocast and inference-mode context; if grad mode is on it adds
    ``torch.no_grad()`` (an inference graph cannot carry autograd). The graph and its memory
    are released before returning.

    Args:
        fn: callable from tensors to (nested) tensors, usually a module in eval mode.
        probe_a: positional inputs of the first probe (see :func:`contrasting_probes`).
        probe_b: positional inputs of the second probe; same shapes and dtypes as A.
        watch: module whose state is restored between runs (defaults to ``fn`` if a module).
        atol: 0.0 for bitwise; else the largest absolute difference accepted.
        name: label in the report.

    Returns:
        A :class:`ParityReport`; call ``.raise_if_failed()`` to turn a failure into an error.
    """
    runner = GraphRunner(fn, mode="on", watch=watch, name=name, max_graphs=1)
    try:
        return verify_with(runner, probe_a, probe_b, atol=atol)
    finally:
        runner.release()


def _grad_off() -> AbstractContextManager[Any]:
    if torch.is_grad_enabled() and not torch.is_inference_mode_enabled():
        return torch.no_grad()
    return nullcontext()


def verify_with(
    runner: GraphRunner, probe_a: Sequence[Tensor], probe_b: Sequence[Tensor], *, atol: float
) -> ParityReport:
    """:func:`verify_parity` on a given runner (a seam: tests pass runners with emulated graphs)."""
    fn, watch = runner.fn, runner.watch
    with _grad_off():
        with preserved_state(watch):
            eager_a = fn(*probe_a)
        with preserved_state(watch):
            eager_b = fn(*probe_b)
        runs = []
        for probe in (probe_a, probe_b, probe_a):
            with preserved_state(watch):
                runs.append(runner(*probe))
    info = runner.info()
    if info.replays != 3 or info.eager_calls:
        reason = "; ".join(info.fallbacks) or f"{info.eager_calls} of 3 graphed calls ran eager"
        return ParityReport(runner.name, graphed=False, reason=reason, atol=atol)
    signature = info.graphs[0].signature if info.graphs else None
    leaves = _compare_leaves(eager_a, eager_b, runs, atol)
    if isinstance(leaves, str):
        return ParityReport(runner.name, graphed=True, signature=signature, reason=leaves, atol=atol)
    return ParityReport(runner.name, graphed=True, leaves=leaves, signature=signature, atol=atol)


def verify_segmented(
    runner: SegmentedGraphRunner, probe_a: Sequence[Tensor], probe_b: Sequence[Tensor], *, atol: float = 0.0
) -> ParityReport:
    """:func:`verify_parity` for a multi-seam runner: the segments called in order (eager) against
    the runner (graphed segments replayed, eager ones run), on two probes and probe A again. Every
    graphed segment must serve all three calls from its graph. The caller releases the runner."""
    def eager(*inputs: Tensor) -> Any:
        value: Any = inputs
        for segment in runner.segments:
            value = segment.fn(*(tuple(value) if isinstance(value, tuple | list) else (value,)))
        return value

    watch = runner.watch
    with _grad_off():
        with preserved_state(watch):
            eager_a = eager(*probe_a)
        with preserved_state(watch):
            eager_b = eager(*probe_b)
        runs = []
        for probe in (probe_a, probe_b, probe_a):
            with preserved_state(watch):
                runs.append(runner(*probe))
    infos = runner.segment_infos()
    short = [i for i in infos if i.replays != 3 or i.eager_calls]
    if not infos or short:
        reason = "; ".join(f"{i.name}: " + ("; ".join(i.fallbacks) or f"{i.eager_calls} of 3 calls ran eager")
                           for i in short) or "no segment is graphed"
        return ParityReport(runner.name, graphed=False, reason=reason, atol=atol)
    signature = "; ".join(f"{i.name}: {i.graphs[0].signature}" for i in infos if i.graphs)
    leaves = _compare_leaves(eager_a, eager_b, runs, atol)
    if isinstance(leaves, str):
        return ParityReport(runner.name, graphed=True, signature=signature, reason=leaves, atol=atol)
    return ParityReport(runner.name, graphed=True, leaves=leaves, signature=signature, atol=atol)


def _matches(x: Tensor, y: Tensor, atol: float) -> bool:
    if atol == 0:
        return bitwise_equal(x, y)
    return x.shape == y.shape and x.dtype == y.dtype and max_abs_diff(x, y) <= atol


def _compare_leaves(eager_a: Any, eager_b: Any, runs: list[Any], atol: float) -> tuple[LeafResult, ...] | str:
    ea, spec = flatten(eager_a)
    eb, _ = flatten(eager_b)
    first_a, replay_b, replay_a = (flatten(run)[0] for run in runs)
    if not len(ea) == len(eb) == len(first_a) == len(replay_b) == len(replay_a):
        return "output structure differs between calls; parity needs one structure"
    results = []
    for path, a, b, a1, rb, a2 in zip(leaf_paths(spec), ea, eb, first_a, replay_b, replay_a):
        probes_differ = not bitwise_equal(a, b)
        results.append(
            LeafResult(
                path=path,
                shape=tuple(a.shape),
                dtype=str(a.dtype).removeprefix("torch."),
                replay_a_equal=_matches(a1, a, atol) and _matches(a2, a, atol),
                replay_b_equal=_matches(rb, b, atol),
                probes_differ=probes_differ,
                stale=probes_differ and bitwise_equal(a2, b),
                max_abs_diff_a=max(max_abs_diff(a1, a), max_abs_diff(a2, a)),
                max_abs_diff_b=max_abs_diff(rb, b),
            )
        )
    return tuple(results)
