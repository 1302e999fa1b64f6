"""Training numerics over N steps: is a graphed run within the noise eager has on its own?

Step-0 parity (:mod:`.train_parity`) asks whether one graphed step equals one eager step. Over a
run a second question matters: some networks do not reproduce themselves even eagerly (weight
gradients that accumulate with atomics differ by ~1e-7 relative at one step, and the optimizer
compounds that into percent-level loss differences after tens of steps), so bit identity of a
graphed run is a bar eager itself misses. Three runs therefore train from one state, on the same
batches, with the same optimizer and seeds:

- reference: eager;
- control: eager again; its distance from the reference is the *spread*, eager's own noise;
- candidate: graphed through :class:`GraphedTraining` (or any other forward under test).

After N steps the per-step losses, the weights, the last step's gradients and the buffers
(BatchNorm statistics) are compared group by group, each as one relative L2 distance. Classes:

- ``exact``: candidate and control both equal the reference bit for bit, every group;
- ``eager-noise``: the control already differs, and in every group the candidate is bitwise
  equal or within ``noise_factor`` times the control's distance (the spread is reported);
- ``diverges``: the candidate differs where eager reproduces itself, or beyond the spread in
  some group. A bug, never a supported configuration.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from .compare import bitwise_equal
from .errors import ParityError
from .training import GraphedTraining

NumericsClass = Literal["exact", "eager-noise", "diverges"]
NUMERICS_CLASSES: tuple[NumericsClass, ...] = ("exact", "eager-noise", "diverges")
GROUPS = ("loss", "weights", "grads", "buffers")
NOISE_FACTOR = 4.0  # two draws of the same noise process land within a few times of each other

Batch = tuple[Sequence[Tensor], Any]  # positional inputs of the forward, and the loss's target
Arm = Callable[[nn.Module], Callable[..., Any]]  # module -> the forward a run calls
LossFn = Callable[[Any, Any, nn.Module], Tensor]  # (outputs, target, module) -> scalar


@dataclass(frozen=True)
class RunTrace:
    """What one run leaves behind: every step's loss, then the final weights, the last step's
    gradients (as the optimizer used them) and the final buffers."""

    losses: Tensor
    weights: dict[str, Tensor]
    grads: dict[str, Tensor | None]
    buffers: dict[str, Tensor]

    def group(self, name: str) -> dict[str, Tensor | None]:
        if name == "loss":
            return {"loss": self.losses}
        return dict(getattr(self, name))


def _seed(seed: int) -> None:
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def group_equal(a: Mapping[str, Tensor | None], b: Mapping[str, Tensor | None]) -> bool:
    """Same names, and every tensor bit for bit equal (None only against None)."""
    if a.keys() != b.keys():
        return False
    for name, x in a.items():
        y = b[name]
        if x is None or y is None:
            if x is not y:
                return False
        elif not bitwise_equal(x, y):
            return False
    return True


def group_distance(a: Mapping[str, Tensor | None], ref: Mapping[str, Tensor | None]) -> float:
    """``||a - ref|| / ||ref||`` over every tensor of the group together (float64); infinite
    when the names, shapes or missing gradients differ, NaN where a non-finite value differs.
    Equal elements count as no difference even when infinite (a buffer masked with inf by
    design, like a DETR anchor grid) or NaN in both (an fp16 overflow step's gradients, which
    the grad scaler skips), and non-finite reference values add nothing to ``||ref||``."""
    if a.keys() != ref.keys():
        return math.inf
    diff_sq, ref_sq = 0.0, 0.0
    for name, r in ref.items():
        x = a[name]
        if x is None or r is None:
            if x is not r:
                return math.inf
            continue
        if x.shape != r.shape:
            return math.inf
        x64, r64 = x.detach().to("cpu", torch.float64), r.detach().to("cpu", torch.float64)
        same = (x64 == r64) | (x64.isnan() & r64.isnan())
        if bool((~same & ~(x64.isfinite() & r64.isfinite())).any()):
            return math.nan  # a non-finite value on one side only: no finite distance says how far
        diff = torch.where(same, 0.0, x64 - r64)
        diff_sq += float(diff.square().sum())
        ref_sq += float(torch.where(torch.isfinite(r64), r64, 0.0).square().sum())
    if diff_sq == 0.0:
        return 0.0
    return math.sqrt(diff_sq) / max(math.sqrt(ref_sq), 1e-30)


def trace_hash(trace: RunTrace) -> str:
    """First 16 hex digits of a sha256 over every tensor of ``trace`` (names, dtypes, shapes,
    bytes): equal hashes mean bit-identical runs, so a later run can be checked against it."""
    digest = hashlib.sha256()
    for group in GROUPS:
        for name, t in sorted(trace.group(group).items()):
            digest.update(f"{group}/{name}".encode())
            if t is None:
                digest.update(b"none")
                continue
            t = t.detach().to("cpu").contiguous()
            digest.update(f"{t.dtype}{tuple(t.shape)}".encode())
            digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


def classify_runs(
    reference: RunTrace, control: RunTrace, candidate: RunTrace, *, noise_factor: float = NOISE_FACTOR
) -> tuple[NumericsClass, dict[str, Any]]:
    """The class of ``candidate`` against ``reference``, with ``control`` as eager's own noise.

    Returns the class and the evidence: per group ``spread`` (control vs reference),
    ``distance`` (candidate vs reference), and which groups are bitwise equal.
    """
    spread = {g: group_distance(control.group(g), reference.group(g)) for g in GROUPS}
    distance = {g: group_distance(candidate.group(g), reference.group(g)) for g in GROUPS}
    control_exact = {g: group_equal(control.group(g), reference.group(g)) for g in GROUPS}
    candidate_exact = {g: group_equal(candidate.group(g), reference.group(g)) for g in GROUPS}
    evidence = {
        "spread": spread,
        "distance": distance,
        "control_exact": control_exact,
        "candidate_exact": candidate_exact,
    }
    if all(control_exact.values()):
        return ("exact" if all(candidate_exact.values()) else "diverges"), evidence
    within = all(candidate_exact[g] or within_spread(spread[g], distance[g], noise_factor) for g in GROUPS)
    return ("eager-noise" if within else "diverges"), evidence


def within_spread(spread: float, distance: float, noise_factor: float = NOISE_FACTOR) -> bool:
    """Whether a candidate's ``distance`` from the reference stays within eager's own ``spread``.

    A NaN spread means the two eager runs already disagree on non-finite values (under fp16
    autocast, one run's last gradients overflowed where the other's did not: the grad scaler
    skips that step in both), so the group says nothing against the candidate unless its
    structure differs (an infinite distance: names, shapes or missing gradients)."""
    if math.isnan(spread):
        return not math.isinf(distance)
    return spread > 0 and distance <= noise_factor * spread


@dataclass(frozen=True)
class NumericsReport:
    """Result of :func:`compare_training_runs`.

    Attributes:
        numerics_class: ``exact``, ``eager-noise`` or ``diverges`` (see the module docstring).
        steps: optimizer steps each run took.
        spread: relative distance control vs reference, per group (eager's own noise).
        distance: relative distance candidate vs reference, per group.
        control_exact, candidate_exact: which groups matched the reference bit for bit.
        graphed: whether the candidate replayed captured graphs for every step.
        reason: why it did not, when ``graphed`` is False.
        final_losses: last-step loss of reference, control and candidate.
        reference_hash: :func:`trace_hash` of the reference run.
        noise_factor: the spread multiple ``eager-noise`` allows.
    """

    numerics_class: NumericsClass
    steps: int
    spread: dict[str, float]
    distance: dict[str, float]
    control_exact: dict[str, bool]
    candidate_exact: dict[str, bool]
    graphed: bool
    reason: str | None
    final_losses: tuple[float, float, float]
    reference_hash: str
    noise_factor: float = NOISE_FACTOR

    @property
    def ok(self) -> bool:
        """Not ``diverges`` (whether a graph ran is ``graphed``'s business)."""
        return self.numerics_class != "diverges"

    def summary(self) -> str:
        """One line: the class, the steps, the spread and the candidate's distance per group."""

        def groups(values: Mapping[str, float]) -> str:
            return ", ".join(f"{g} {values[g]:.2g}" for g in GROUPS)

        text = f"{self.numerics_class} after {self.steps} steps"
        if self.numerics_class == "exact":
            text += ": candidate and a second eager run bit-identical to eager"
        else:
            text += (
                f"; eager-vs-eager spread: {groups(self.spread)}; candidate-vs-eager: {groups(self.distance)}"
            )
        if not self.graphed:
            text = f"NOT GRAPHED ({self.reason}): {text}"
        return text

    def raise_if_failed(self) -> None:
        """Raise :class:`ParityError` with the summary when the class is ``diverges``."""
        if not self.ok:
            raise ParityError(self.summary())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (infinite distances stay floats; ``json`` writes them as Infinity)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NumericsReport:
        """Inverse of :meth:`to_dict`."""
        return cls(**{**data, "final_losses": tuple(data["final_losses"])})


def eager_arm(module: nn.Module) -> Callable[..., Any]:
    """The module itself: an eager run."""
    return module


def graphed_arm(warmup_iters: int = 3) -> Arm:
    """A :class:`GraphedTraining` around the module that captures on the first step."""

    def wrap(module: nn.Module) -> Callable[..., Any]:
        return GraphedTraining(
            module, repeat_threshold=1, warmup_iters=warmup_iters, name="compare_training_runs"
        )

    return wrap


def run_trace(
    module: nn.Module,
    forward: Callable[..., Any],
    batches: Sequence[Batch],
    loss_fn: LossFn,
    *,
    optimizer: torch.optim.Optimizer,
    amp: Callable[[], AbstractContextManager[Any]],
    scaler: torch.amp.GradScaler,
    max_grad_norm: float | None,
    seed: int,
) -> RunTrace:
    """Train ``module`` through ``forward`` on ``batches`` (one optimizer step each)."""
    losses: list[Tensor] = []
    grads: dict[str, Tensor | None] = {}
    for step, (inputs, target) in enumerate(batches):
        _seed(seed + step)
        optimizer.zero_grad(set_to_none=True)
        with amp():
            loss = loss_fn(forward(*inputs), target, module)
        scaler.scale(loss).backward()
        if max_grad_norm:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(module.parameters(), max_grad_norm)
        if step == len(batches) - 1:
            grads = {
                n: (p.grad.detach().clone() if p.grad is not None else None)
                for n, p in module.named_parameters()
            }
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.detach().float().reshape(()))
    return RunTrace(
        losses=torch.stack(losses).cpu(),
        weights={n: p.detach().clone() for n, p in module.named_parameters()},
        grads=grads,
        buffers={n: b.detach().clone() for n, b in module.named_buffers()},
    )


def compare_training_runs(
    make_model: Callable[[], nn.Module],
    batches: Sequence[Batch],
    loss_fn: LossFn,
    *,
    device: str | torch.device = "cuda",
    autocast_dtype: torch.dtype | None = None,
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer] | None = None,
    max_grad_norm: float | None = 10.0,
    candidate: Arm | None = None,
    control: Arm = eager_arm,
    seed: int = 0,
    noise_factor: float = NOISE_FACTOR,
) -> NumericsReport:
    """Train three copies for ``len(batches)`` steps (reference eager, control, candidate) and
    classify the candidate.

    Args:
        make_model: builds the network (called under the seed; every copy then loads the first
            one's state, so the runs start identical).
        batches: one ``(inputs, target)`` per step; inputs are moved to ``device``, the target
            is handed to ``loss_fn`` as it is (put it on the device yourself).
        loss_fn: ``loss_fn(outputs, target, module) -> scalar``, eager in every run; ``module``
            is the run's own network (for a head that runs after the captured part).
        device: where to train.
        autocast_dtype: forward and loss under autocast with this dtype (``cache_enabled=False``);
            fp16 on CUDA adds a GradScaler (the same in every run). None: full precision.
        make_optimizer: ``module -> optimizer``; default SGD, lr 0.01, momentum 0.9.
        max_grad_norm: clip the gradient norm before each step (None: no clipping).
        candidate: the forward under test; default :func:`graphed_arm` (GraphedTraining). Any
            other arm is reported as not graphed.
        control: the second eager run (tests pass a perturbed one).
        seed: seed of the model, of each step's RNG (``seed + step``), the same in every run.
        noise_factor: how far beyond the spread ``eager-noise`` still reaches.

    Raises:
        ParityError: the reference run's loss went non-finite (nothing can be compared then:
            lower the learning rate or use fewer steps).
    """
    device = torch.device(device)
    if not batches:
        raise ParityError("compare_training_runs needs at least one batch (one per step)")
    moved = [(tuple(x.to(device) for x in inputs), target) for inputs, target in batches]
    _seed(seed)
    first = make_model().to(device).train()
    state = {
        k: v.detach().clone() for k, v in first.state_dict().items()
    }  # the reference trains `first` in place
    make_optimizer = make_optimizer or (lambda m: torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9))
    scaled = autocast_dtype == torch.float16 and device.type == "cuda"

    def amp() -> AbstractContextManager[Any]:
        if autocast_dtype is None:
            return nullcontext()
        return torch.autocast(device.type, dtype=autocast_dtype, cache_enabled=False)

    traces: list[RunTrace] = []
    graphed = False
    reason: str | None = "the candidate is not a GraphedTraining (a second forward under test)"
    for index, arm in enumerate((eager_arm, control, candidate or graphed_arm())):
        if index == 0:
            model = first
        else:
            _seed(seed)
            model = make_model().to(device).train()
            model.load_state_dict(state)
        forward = arm(model)
        traces.append(
            run_trace(
                model,
                forward,
                moved,
                loss_fn,
                optimizer=make_optimizer(model),
                amp=amp,
                scaler=torch.amp.GradScaler(device.type, enabled=scaled),
                max_grad_norm=max_grad_norm,
                seed=seed,
            )
        )
        if index == 0 and not bool(torch.isfinite(traces[0].losses).all()):
            step = int((~torch.isfinite(traces[0].losses)).nonzero()[0])
            raise ParityError(
                f"the reference eager run's loss is not finite from step {step} on; nothing can be "
                "compared: lower the learning rate (make_optimizer) or take fewer steps"
            )
        if index == 2 and isinstance(forward, GraphedTraining):
            info = forward.info()
            graphed = info.replays > 0 and info.eager_calls == 0 and info.latched is None
            reason = (
                None
                if graphed
                else ("; ".join(info.fallbacks) or info.latched or "the graphed run ran eager")
            )
            forward.release()
    reference, second, third = traces
    numerics_class, evidence = classify_runs(reference, second, third, noise_factor=noise_factor)
    final = tuple(float(t.losses[-1]) for t in traces)
    return NumericsReport(
        numerics_class=numerics_class,
        steps=len(moved),
        graphed=graphed,
        reason=reason,
        final_losses=(final[0], final[1], final[2]),
        reference_hash=trace_hash(reference),
        noise_factor=noise_factor,
        **evidence,
    )
