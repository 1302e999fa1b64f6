"""The family contract: the small protocol the facade, trainer, validator and predictor call.

A family is one folder: ``spec.py`` (its ``FamilySpec``, data), ``nn.py`` (the pure network),
``loss.py``, ``postprocess.py`` and ``family.py``, a subclass of ``Family`` below. The user's
``LibreYOLO`` facade *holds* a family instance (one per model); it never inherits from it.

The three graph seams are methods, so the captured and eager paths call the same code:

- ``inference_forward(net, images)``: what inference capture records (the whole network, no
  NMS, no ``.item()``, no data-dependent shape);
- ``training_forward(net, images)``: the network half that training capture records;
- ``compute_loss(outputs, targets, ctx)``: the eager remainder both training paths call
  (preceded by ``training_head`` for families whose network needs the targets: split capture).

Everything data-dependent (assignment, matching, NMS) lives in ``compute_loss`` and
``postprocess``, never in a seam.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeAlias

import torch
from torch import Tensor, nn

from ..errors import CheckpointError, ConfigError

if TYPE_CHECKING:
    from .spec import FamilySpec

TensorTree: TypeAlias = Tensor | Sequence["TensorTree"] | Mapping[str, "TensorTree"]
"""What a seam returns: a tensor, or lists / tuples / dicts of them (the graph runners copy trees)."""

NORM_TYPES = (nn.BatchNorm1d, nn.BatchNorm2d, nn.SyncBatchNorm, nn.GroupNorm, nn.LayerNorm, nn.InstanceNorm2d)


@dataclass(frozen=True)
class LossContext:
    """What a loss may depend on beyond outputs and targets.

    Attributes:
        epoch, epochs: 0-based current epoch and the run's total.
        close_mosaic: the run's last epochs trained without mosaic (``TrainConfig.close_mosaic``);
            YOLOX switches its L1 term on for them.
        gains: the resolved weight of each loss term (family defaults, then the user's).
        world_size: ranks whose gradients DDP averages.
        global_batch: images per optimizer step over all ranks.
        normalizer_sum: maps a rank-local 0-d tensor to its sum over ranks (an all-reduce);
            None in one process. Losses that normalise by a count (boxes, positives) call it
            exactly once per call, whatever the data, so collectives line up on every rank.
    """

    epoch: int = 0
    epochs: int = 1
    close_mosaic: int = 0
    gains: Mapping[str, float] = field(default_factory=dict)
    world_size: int = 1
    global_batch: int | None = None
    normalizer_sum: Callable[[Tensor], Tensor] | None = None


@dataclass(frozen=True)
class LossResult:
    """``total``: the scalar to backward. ``items``: detached ``float32 [len(loss_names)]``, the
    terms in the family's declared order (logged; never read back on the host in the hot path)."""

    total: Tensor
    items: Tensor


class Family(abc.ABC):
    """One family's implementation for one (size, task, nc). The facade creates and holds it.

    Subclasses implement the abstract methods; the others have defaults that suit most families.
    A subclass keeps per-model state it needs (a loss object, a switch that changes the training
    outputs), never the network: the facade owns ``net`` and passes it in, so validation can run
    the EMA copy through the same seam. The declaration (``spec``) is handed in rather than
    imported, so a family's ``spec.py`` can name its implementation without an import cycle.
    """

    training_head_note: ClassVar[str] = ""
    """With ``training_head``: what stays eager under ``train(cuda_graph=True)`` and why, for the
    one line the trainer logs (a generic line when empty)."""

    def __init__(self, spec: FamilySpec, size: str, task: str, nc: int,
                 imgsz: tuple[int, int] | None = None, keypoints: int | None = None) -> None:
        self.spec, self.size, self.task, self.nc = spec, size, task, nc
        self.keypoints = keypoints if keypoints is not None else spec.task(task).default_keypoints
        """Keypoints per instance of a pose model (``TaskDecl.default_keypoints`` when not given,
        a dataset's ``kpt_shape[0]`` after ``train``); None for tasks without keypoints. Passed
        only to families whose tasks declare keypoints, so other families need not take it."""
        self.imgsz = imgsz
        """The image size ``(H, W)`` the model is built for: a family whose network lays something
        out for one size (anchor buffers, position embeddings) builds it for this one; None: the
        family's declared default. Families that compute such things from the input ignore it."""

    # ------------------------------------------------------------------ building
    @abc.abstractmethod
    def build_network(self) -> nn.Module:
        """A freshly initialised network for ``(size, task, nc)``; state-dict keys are a file format."""

    @classmethod
    @abc.abstractmethod
    def infer_nc(cls, state: Mapping[str, Tensor], task: str) -> int:
        """Class count from a bare state dict (checkpoints without metadata)."""

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        """Size from a bare state dict; None when the weights alone cannot tell."""
        return None

    @classmethod
    def infer_keypoints(cls, state: Mapping[str, Tensor], task: str) -> int | None:
        """Keypoints per instance from a bare pose state dict; None when it cannot tell (the
        task's ``default_keypoints`` is used then)."""
        return None

    @classmethod
    def remap_state(cls, state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """Rename keys older writers used, so their files load unchanged (default: none)."""
        return dict(state)

    # ------------------------------------------------------------------ graph seams
    @abc.abstractmethod
    def inference_forward(self, net: nn.Module, images: Tensor) -> TensorTree:
        """Inference seam: ``float [B, 3, H, W]`` RGB in [0, 1] -> what ``postprocess`` reads, every
        tensor of it with the batch as its first dimension (predict pads a short last batch and
        keeps the first rows: ``predict.predictor.pad_rows``)."""

    @abc.abstractmethod
    def training_forward(self, net: nn.Module, images: Tensor) -> TensorTree:
        """Training seam: images -> what ``compute_loss`` reads (the network half only)."""

    def inference_stages(self, net: nn.Module) -> list[tuple[Callable[..., Any], bool, str]] | None:
        """Multi-seam capture: ``inference_forward`` as ``(fn, graphable, name)`` stages, each fn
        taking what the previous returned (a tuple is spread), the first the images; graph
        capture then replays the graphable stages and runs the others eagerly (an op inside the
        network that must stay eager, e.g. a deformable convolution). Default None: the whole
        seam is one graph."""
        return None

    def training_head(self, net: nn.Module, outputs: Any, targets: Any) -> Any:
        """Split capture: network work that depends on the targets, run eagerly after the captured
        ``training_forward`` and inside the same (DDP-wrapped) module, e.g. a DETR decoder whose
        denoising queries follow the batch's boxes. Default: none (the outputs pass through).
        Families that override it get ``targets`` moved to the device by DDP."""
        return outputs

    @abc.abstractmethod
    def compute_loss(self, outputs: Any, targets: Any, ctx: LossContext) -> LossResult:
        """The eager remainder both training paths call (assigners, matching, the terms)."""

    @abc.abstractmethod
    def postprocess(self, outputs: Any, options: Any) -> list[Any]:
        """Seam outputs -> one prediction per image, in the form the task defines (eager)."""

    @abc.abstractmethod
    def sample_targets(self, batch: int, imgsz: int, generator: torch.Generator) -> Any:
        """Plausible targets of the task's schema for ``batch`` images (the parity tool's step)."""

    def predict_forward(self, net: nn.Module, forward: Callable[[Tensor], Any]) -> Callable[[Tensor], Any]:
        """What ``predict`` calls on each batch, given the seam's forward over ``net`` (eager,
        compiled or a graph runner). Default: that forward. A family that reuses per-picture work
        across calls wraps it (SAM's image-embedding cache)."""
        return forward

    def predict_postprocess(self, net: nn.Module, outputs: Any, options: Any, infos: Sequence[Any]) -> list[Any]:
        """``predict``'s post-processing, with the network and each picture's preprocessing info
        (``Task.prepare_batch``). Default: ``postprocess``. A promptable family decodes its prompts
        here, eagerly, with the network's prompt side (SAM)."""
        return self.postprocess(outputs, options)

    # ------------------------------------------------------------------ training hooks
    def parameter_groups(self, net: nn.Module, *, weight_decay: float) -> list[dict[str, Any]]:
        """Optimizer groups. Default: decay on weights only; norms and biases get none.

        Each group is a dict with ``params``, ``weight_decay``, ``group`` (a name the schedule
        reads: ``"bias"`` warms up from ``warmup_bias_lr``) and optionally ``lr_scale`` (a
        multiplier of the base learning rate, e.g. 0.1 for a pretrained backbone).
        """
        return default_parameter_groups(net, weight_decay=weight_decay)

    def head_prefixes(self) -> tuple[str, ...]:
        """State-dict key prefixes of the class outputs: ``train(pretrained=...)`` leaves them
        freshly initialised (they belong to another set of classes). Default: none."""
        return ()

    def set_num_queries(self, net: nn.Module, num_queries: int) -> None:
        """``train(num_queries=...)``: make a query-based decoder select ``num_queries`` queries
        (the weights do not change). Default: the family has no queries; say so."""
        raise ConfigError(f"num_queries={num_queries}: {self.spec.display_name} has no decoder queries; the option "
                          "applies to the DETR families (rtdetr, rtdetrv2, dfine, deim, rtdetrv4, deimv2)")

    def epoch_start(self, epoch: int, epochs: int, close_mosaic: int = 0) -> str | None:
        """Called before each training epoch (``close_mosaic``: the run's last epochs without
        mosaic). Return a reason when what ``training_forward`` returns, or how the loss reads it,
        changes from this epoch on (the trainer then drops captured graphs), else None."""
        return None

    def check_state(self, net: nn.Module, state: Mapping[str, Tensor], source: str) -> None:
        """Raise ``CheckpointError`` naming missing, unexpected and misshapen keys."""
        own = net.state_dict()
        missing = [k for k in own if k not in state]
        unexpected = [k for k in state if k not in own]
        wrong = [f"{k} {tuple(state[k].shape)} vs {tuple(v.shape)}" for k, v in own.items()
                 if k in state and state[k].shape != v.shape]
        if missing or unexpected or wrong:
            raise CheckpointError(
                f"{source}: weights do not fit {self.spec.display_name}-{self.size} {self.task} (nc={self.nc}): "
                f"{len(missing)} missing keys (e.g. {missing[:3]}), {len(unexpected)} unexpected "
                f"(e.g. {unexpected[:3]}), {len(wrong)} of another shape (e.g. {wrong[:2]}). "
                "Is the checkpoint for another size, task or family?")


def default_parameter_groups(net: nn.Module, *, weight_decay: float) -> list[dict[str, Any]]:
    """(biases, norm weights, other weights): decay only pulls conv/linear weights toward zero;
    on norm scales and biases it only hurts."""
    decay: list[nn.Parameter] = []
    norm: list[nn.Parameter] = []
    bias: list[nn.Parameter] = []
    for module in net.modules():
        for name, param in module.named_parameters(recurse=False):
            if not param.requires_grad:
                continue
            if name == "bias":
                bias.append(param)
            elif isinstance(module, NORM_TYPES):
                norm.append(param)
            else:
                decay.append(param)
    return [{"params": bias, "weight_decay": 0.0, "group": "bias"},
            {"params": norm, "weight_decay": 0.0, "group": "norm"},
            {"params": decay, "weight_decay": weight_decay, "group": "decay"}]


def has_training_head(family: Family) -> bool:
    """Whether ``family`` runs network work after the captured seam (split capture)."""
    return type(family).training_head is not Family.training_head
