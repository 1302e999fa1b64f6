"""Training parity at step 0: loss, every gradient and every buffer, graphed vs eager.

Four copies of the model start from identical state on identical data:

- eager: the reference;
- control: eager again with the same seed, to see whether eager reproduces itself;
- rng probe: eager with a different RNG seed, to see which tensors depend on random numbers
  (a graph draws them from its own Philox stream, so dropout-like tensors differ legitimately);
- graphed: through :class:`GraphedTraining` with ``repeat_threshold=1``.

Each tensor of the graphed run is classified against the reference: ``exact`` (bitwise),
``last-bit`` (at most 2 ulp apart), ``eager-noise`` (eager differs from itself by a similar
amount), ``own-rng`` (the tensor depends on the RNG stream), else ``mismatch``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from .compare import bitwise_equal, max_abs_diff, max_ulp_distance
from .errors import ParityError
from .training import GraphedTraining

Verdict = Literal["exact", "last-bit", "eager-noise", "own-rng", "mismatch"]
VERDICTS: tuple[Verdict, ...] = ("exact", "last-bit", "eager-noise", "own-rng", "mismatch")
LAST_BIT_ULP = 2
NOISE_FACTOR = 4.0
_KIND_LABEL = {"loss": "loss", "grad": "gradients", "buffer": "buffers"}


@dataclass(frozen=True)
class TensorVerdict:
    """How one tensor of the graphed run compares with the eager reference."""

    kind: str  # "loss", "grad" or "buffer"
    name: str
    verdict: Verdict
    max_abs_diff: float
    max_ulp: int | None
    control_abs_diff: float


def classify(
    graphed: Tensor | None, eager: Tensor | None, control: Tensor | None, rng_probe: Tensor | None
) -> tuple[Verdict, float, int | None, float]:
    """Classify ``graphed`` against ``eager`` using the control and rng-probe runs.

    Returns (verdict, max |graphed - eager|, max ulp distance or None, max |control - eager|).
    """
    if graphed is None or eager is None:
        same = graphed is None and eager is None
        return ("exact" if same else "mismatch"), (0.0 if same else float("inf")), None, 0.0
    control_diff = max_abs_diff(control, eager) if control is not None else 0.0
    if bitwise_equal(graphed, eager):
        return "exact", 0.0, 0, control_diff
    diff = max_abs_diff(graphed, eager)
    ulp = max_ulp_distance(graphed, eager)
    if ulp is not None and ulp <= LAST_BIT_ULP:
        return "last-bit", diff, ulp, control_diff
    if control is not None and not bitwise_equal(control, eager) and diff <= NOISE_FACTOR * control_diff:
        return "eager-noise", diff, ulp, control_diff
    if rng_probe is not None and not bitwise_equal(rng_probe, eager):
        return "own-rng", diff, ulp, control_diff
    return "mismatch", diff, ulp, control_diff


@dataclass(frozen=True)
class TrainParityReport:
    """Result of :func:`compare_train_step`.

    Attributes:
        verdicts: one entry for the loss, each parameter gradient and each buffer.
        graphed: whether the graphed run really replayed a captured graph.
        reason: why it did not, when ``graphed`` is False.
    """

    verdicts: tuple[TensorVerdict, ...]
    graphed: bool
    reason: str | None = None

    def counts(self, kind: str) -> dict[Verdict, int]:
        """Verdict -> number of tensors of ``kind`` ("loss", "grad" or "buffer")."""
        found = Counter(v.verdict for v in self.verdicts if v.kind == kind)
        return {verdict: found.get(verdict, 0) for verdict in VERDICTS}

    @property
    def ok(self) -> bool:
        """Graphed, and nothing classified as a mismatch."""
        return self.graphed and all(v.verdict != "mismatch" for v in self.verdicts)

    def mismatches(self) -> list[TensorVerdict]:
        """The tensors that differ without an explanation."""
        return [v for v in self.verdicts if v.verdict == "mismatch"]

    def summary(self) -> str:
        """E.g. ``loss exact; 62/62 gradients bit-identical, 0 last-bit, ...; 60/60 buffers ...``."""
        parts = []
        for kind in ("loss", "grad", "buffer"):
            counts = self.counts(kind)
            total = sum(counts.values())
            if kind == "loss":
                parts.append(f"loss {next((v for v, n in counts.items() if n), 'missing')}")
                continue
            rest = ", ".join(f"{counts[v]} {v}" for v in VERDICTS[1:])
            parts.append(f"{counts['exact']}/{total} {_KIND_LABEL[kind]} bit-identical, {rest}")
        text = "; ".join(parts)
        if not self.graphed:
            text = f"NOT GRAPHED ({self.reason}): {text}"
        bad = self.mismatches()
        if bad:
            text += "\nmismatches: " + ", ".join(
                f"{v.kind} {v.name} (max |diff| {v.max_abs_diff:.3g})" for v in bad[:10]
            )
        return text

    def raise_if_failed(self) -> None:
        """Raise :class:`ParityError` with the summary unless the report is ok."""
        if not self.ok:
            raise ParityError(self.summary())


_StepResult = tuple[Tensor, dict[str, Tensor | None], dict[str, Tensor]]


def _seed(seed: int) -> None:
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def _run_step(
    model: nn.Module,
    call: Callable[..., Any],
    inputs: Sequence[Tensor],
    loss_fn: Callable[[Any, Sequence[Tensor]], Tensor],
    seed: int,
    amp: Callable[[], AbstractContextManager[Any]],
) -> _StepResult:
    _seed(seed)
    with amp():
        outputs = call(*inputs)
        loss = loss_fn(outputs, inputs)
    loss.backward()
    grads = {
        n: (p.grad.detach().clone() if p.grad is not None else None) for n, p in model.named_parameters()
    }
    buffers = {n: b.detach().clone() for n, b in model.named_buffers()}
    return loss.detach().clone(), grads, buffers


def compare_train_step(
    make_model: Callable[[], nn.Module],
    make_inputs: Callable[[], Sequence[Tensor]],
    loss_fn: Callable[[Any, Sequence[Tensor]], Tensor],
    *,
    device: str | torch.device = "cuda",
    autocast_dtype: torch.dtype | None = None,
    seed: int = 0,
    warmup_iters: int = 3,
) -> TrainParityReport:
    """Compare one training step (forward, eager loss, backward) graphed vs eager.

    Args:
        make_model: builds the network (called under ``torch.manual_seed(seed)``; the copies
            are then loaded with the first one's state so all four start identical).
        make_inputs: builds the positional inputs (called once, under the seed); moved to
            ``device``.
        loss_fn: ``loss_fn(outputs, inputs) -> scalar tensor``; eager in every run. Close
            over targets if the loss needs them.
        device: where to run.
        autocast_dtype: run forward and loss under CUDA autocast with this dtype
            (``cache_enabled=False``); None for full precision.
        seed: seed for model init, inputs and the step's RNG.
        warmup_iters: warmup runs of the graphed copy before capture.
    """
    device = torch.device(device)
    models = []
    for _ in range(4):
        _seed(seed)
        models.append(make_model().to(device).train())
    reference_state = models[0].state_dict()
    for copy in models[1:]:
        copy.load_state_dict(reference_state)
    _seed(seed)
    inputs = tuple(x.to(device) for x in make_inputs())

    def amp() -> AbstractContextManager[Any]:
        if autocast_dtype is None:
            return nullcontext()
        return torch.autocast(device.type, dtype=autocast_dtype, cache_enabled=False)

    eager = _run_step(models[0], models[0], inputs, loss_fn, seed, amp)
    control = _run_step(models[1], models[1], inputs, loss_fn, seed, amp)
    probe = _run_step(models[2], models[2], inputs, loss_fn, seed + 1, amp)
    helper = GraphedTraining(
        models[3], repeat_threshold=1, warmup_iters=warmup_iters, name="compare_train_step"
    )
    graphed = _run_step(models[3], helper, inputs, loss_fn, seed, amp)
    info = helper.info()
    replayed = info.replays > 0 and info.eager_calls == 0
    reason = None if replayed else ("; ".join(info.fallbacks) or info.latched or "the graphed run ran eager")
    helper.release()
    return TrainParityReport(_verdicts(eager, control, probe, graphed), graphed=replayed, reason=reason)


def _verdicts(
    eager: _StepResult, control: _StepResult, probe: _StepResult, graphed: _StepResult
) -> tuple[TensorVerdict, ...]:
    found = []
    verdict, diff, ulp, noise = classify(graphed[0], eager[0], control[0], probe[0])
    found.append(TensorVerdict("loss", "loss", verdict, diff, ulp, noise))
    tables: list[tuple[str, list[Mapping[str, Tensor | None]]]] = [
        ("grad", [eager[1], graphed[1], control[1], probe[1]]),
        ("buffer", [eager[2], graphed[2], control[2], probe[2]]),
    ]
    for kind, (ref_t, graphed_t, control_t, probe_t) in tables:
        for name, ref in ref_t.items():
            verdict, diff, ulp, noise = classify(graphed_t.get(name), ref, control_t.get(name), probe_t.get(name))
            found.append(TensorVerdict(kind, name, verdict, diff, ulp, noise))
    return tuple(found)
