"""A family's training numerics class: ``libreyolo_cudagraph.compare_training_runs`` on the zoo.

The family's training seam is built three times from one seeded state and trained for N steps
(default 20) on the same synthetic batches (uniform random images, the family's
``sample_targets``) with its own eager loss (and, for a split-capture family, its eager training
head, run on each copy's own network): reference eager, control eager, candidate graphed. The
candidate is classed ``exact``, ``eager-noise`` (with eager's own spread) or ``diverges``, and
the result comes back as a report and a certificate (``certificate.py``) for the shipped table.

``tools/numerics_classes.py`` runs it per family, size, task and precision on the GPU machine,
each row in a fresh process. On a CPU there is no graph: ``candidate="eager"`` (a third eager
run) or any ``module -> forward`` function stands in, so the comparison runs in tests.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor, nn

from ..certificate import Certificate, current_environment, probe_hashes, today, training_precision
from ..contract.family import LossContext, has_training_head
from ..devices import resolve_device
from ..errors import ConfigError
from ..handle import ModelHandle
from ..tensor_trees import map_tensors
from ..zoo.building import resolve_source

if TYPE_CHECKING:
    from libreyolo_cudagraph import NumericsReport

log = logging.getLogger(__name__)

Arm = Callable[[nn.Module], Callable[..., Any]]
STEPS = 20


@contextmanager
def deterministic_cudnn(enabled: bool) -> Iterator[None]:
    """cuDNN's deterministic heuristics for the measurement (as the parity matrix runs), restored after."""
    saved = torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    if enabled:
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    try:
        yield
    finally:
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved


def measure_numerics(family: str, size: str, task: str | None = None, *, imgsz: int | None = None, batch: int = 8,
                     steps: int = STEPS, amp: bool = False, device: str | torch.device = "cuda", seed: int = 0,
                     lr: float = 0.01, candidate: Literal["graph", "eager"] | Arm = "graph",
                     control: Arm | None = None, deterministic: bool = True) -> tuple[NumericsReport, Certificate]:
    """Class a family's graphed training against two eager runs.

    Args:
        family, size, task: the model (task: the family's default when None).
        imgsz: square training size (default: the family's).
        batch: images per step.
        steps: optimizer steps of each run (SGD, ``lr``, momentum 0.9, gradients clipped at 10).
        amp: fp16 autocast with a GradScaler (CUDA only; refused on a CPU).
        device: where to train.
        seed: model, data and per-step RNG seed, the same in every run.
        candidate: ``"graph"`` (``GraphedTraining``), ``"eager"`` (a third eager run: what a CPU
            can check), or a ``module -> forward`` function.
        control: the second run's arm (default eager; tests pass a perturbed one).
        deterministic: measure under ``cudnn.deterministic`` without autotuning.

    Returns:
        The ``libreyolo_cudagraph.NumericsReport`` and its ``Certificate``.
    """
    from libreyolo_cudagraph import compare_training_runs
    from libreyolo_cudagraph.train_numerics import eager_arm, graphed_arm

    target = resolve_device(device)
    if amp and target.type != "cuda":
        raise ConfigError(f"amp=True measures fp16 autocast, which needs a CUDA device (device is {target}); measure "
                          "amp=False on the CPU")

    def build() -> ModelHandle:
        return ModelHandle.from_source(resolve_source(None, family=family, size=size, task=task, imgsz=imgsz))

    torch.manual_seed(seed)
    owner = build()  # the eager remainder (loss, training head) is the family's code: no weights of its own are read
    decl = owner.spec.task(owner.task)
    imgsz = owner.imgsz
    split = has_training_head(owner.family)
    context = LossContext(gains=decl.loss_gains, global_batch=batch)
    generator = torch.Generator().manual_seed(seed + 1)
    batches = []
    for _ in range(steps):
        images = torch.rand(batch, 3, imgsz, imgsz, generator=generator)
        targets = map_tensors(owner.family.sample_targets(batch, imgsz, generator), lambda t: t.to(target))
        batches.append(((images,), targets))

    def loss_fn(outputs: Any, targets: Any, module: nn.Module) -> Tensor:
        if split:
            outputs = owner.family.training_head(module.net, outputs, targets)  # type: ignore[arg-type]
        return owner.family.compute_loss(outputs, targets, context).total

    def make_model() -> nn.Module:
        return build().training_module()

    arm: Arm = (graphed_arm() if candidate == "graph" else eager_arm if candidate == "eager"
                else candidate)
    with deterministic_cudnn(deterministic):
        report = compare_training_runs(
            make_model, batches, loss_fn, device=target, autocast_dtype=torch.float16 if amp else None,
            make_optimizer=lambda m: torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9), max_grad_norm=10.0,
            candidate=arm, control=control or eager_arm, seed=seed)
        torch.manual_seed(seed)
        probe_net = build().net.to(target).eval()
        hashes = probe_hashes(lambda x: owner.inference_forward(x, net=probe_net), imgsz, device=target)
    cert = Certificate(
        family=owner.spec.name, size=owner.size, task=owner.task, dtype=training_precision(amp, target), batch=batch,
        device=target.type, **current_environment(target), numerics_class=report.numerics_class,
        graphed=report.graphed, probe_hashes={**hashes, "trace": report.reference_hash}, date=today(),
        source=f"tools/numerics_classes.py ({steps} steps{', cudnn.deterministic' if deterministic else ''})",
        spread=dict(report.spread), distance=dict(report.distance))
    log.info("%s-%s %s %s on %s: %s", owner.spec.name, owner.size, owner.task, cert.dtype, target, report.summary())
    return report, cert
