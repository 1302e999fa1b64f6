"""``ModelHandle``: what the jobs (train, val, predict, export, track, graph capture) see of a model.

A handle holds a model's identity (family, size, task, classes, image size, where it came from),
read-only; its network (or, for an exported model, the runtime backend standing in for it); where
the network lives and in which dtype; the fused inference copy; and the graph owner. Jobs read it,
run the network, move or cast it for their run, and return their result. They never change the
identity: the facade (``LibreYOLO``) applies what a job returns (the best weights, new classes,
metrics) by building or swapping handles itself. That keeps every job readable and testable
without the facade, and keeps ``facade.py`` out of the jobs' imports.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch
from torch import Tensor, nn

from .certificate import CERTIFICATE_KEY
from .checkpoint import checkpoint_metadata, cpu_state_dict, inf_by_design, nonfinite_entries
from .coco_names import default_names
from .contract.family import Family, TensorTree
from .contract.spec import FamilySpec
from .data.letterbox import to_network_input
from .devices import resolve_device
from .errors import ConfigError
from .fused_net import FusedNetwork
from .graphs import ModelGraphs
from .layers.layout import is_channels_last
from .runtime import RuntimeNetwork, load_exported
from .tasks import Task, get_task
from .version import __version__
from .zoo.building import ModelSource, rebuild_source
from .zoo.registry import get_family

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Quantization:
    """What ``model.quantize(recipe)`` did (``quantize.py`` sets it; the handle only reads it).

    Attributes:
        recipe: ``"fp16"``, ``"bf16"`` or ``"int8"``.
        fp32_state: CPU copies of every weight before quantizing: ``dequantize()`` restores them
            bit for bit (a cast back from fp16 could not).
        linears: for int8, the module names whose ``nn.Linear`` became ``layers.quantized.Int8Linear``.
    """

    recipe: str
    fp32_state: dict[str, Tensor]
    linears: tuple[str, ...] = ()


class ModelHandle:
    """One model's network and identity, as the jobs use it. Build with ``from_source`` (a
    PyTorch network) or ``from_exported`` (a runtime backend); the facade owns the handle."""

    def __init__(self, spec: FamilySpec, size: str, task: str, nc: int, names: Mapping[int, str],
                 imgsz: int, net: nn.Module, *, checkpoint: Mapping[str, Any] | None = None,
                 ckpt_path: Path | None = None, runtime: RuntimeNetwork | None = None,
                 fuse_default: bool | None = None, family: Family | None = None,
                 keypoints: int | None = None) -> None:
        self._spec, self._size, self._task, self._nc = spec, size, task, nc
        self._names = dict(names)
        self._imgsz = imgsz
        self._family: Family = family or make_family(spec, size, task, nc, imgsz, keypoints)
        self._net = net
        self._runtime = runtime
        self._checkpoint: Mapping[str, Any] = MappingProxyType(dict(checkpoint or {}))
        self._ckpt_path = ckpt_path
        self._fused = FusedNetwork()
        self.fuse_default = fuse_default
        """``fuse(True/False)``'s choice, kept across weight loads; None: the family's declaration."""
        self.graphs = ModelGraphs(self)
        self.quantization: Quantization | None = None
        """Set by ``quantize()`` and cleared by ``dequantize()`` (``quantize.py``)."""

    # ------------------------------------------------------------------ building
    @classmethod
    def from_source(cls, source: ModelSource, *, fuse_default: bool | None = None) -> ModelHandle:
        """Build family and network from ``source`` and load its weights, if any."""
        spec = source.spec
        if not isinstance(source.nc, int) or isinstance(source.nc, bool) or source.nc < 1:
            raise ConfigError(f"nc={source.nc!r} must be a positive number of classes")
        names = normalize_names(source.names, source.nc)
        imgsz = spec.check_imgsz(int(source.imgsz or spec.default_imgsz(source.size, source.task)), task=source.task)
        family = make_family(spec, source.size, source.task, source.nc, imgsz, source.keypoints)
        net = family.build_network()
        if source.state is not None:
            family.check_state(net, source.state, str(source.path))
            masks = inf_by_design(net.state_dict())
            net.load_state_dict(source.state)
            # The loaded values: a buffer built for another size (EC's anchors) keeps the network's own.
            warn_nonfinite(net.state_dict(), str(source.path), masks)
        return cls(spec, source.size, source.task, source.nc, names, imgsz, net, checkpoint=source.checkpoint,
                   ckpt_path=source.path, fuse_default=fuse_default, family=family)

    @classmethod
    def from_checkpoint(cls, ckpt: dict[str, Any], path: str | None) -> ModelHandle:
        """A handle rebuilt from a checkpoint dict already in memory (spawned workers, restarts)."""
        return cls.from_source(rebuild_source(ckpt, path))

    @classmethod
    def from_exported(cls, path: Path, family: str | FamilySpec | None, imgsz: int | None) -> ModelHandle:
        """The family (for post-processing) around a runtime backend (instead of a network)."""
        runtime = load_exported(path)
        meta = runtime.meta
        spec = get_family(meta.family)
        wanted = get_family(family) if isinstance(family, str) else family
        if wanted is not None and wanted.name != spec.name:
            raise ConfigError(f"{path} is an exported {spec.name} model, not {wanted.name}; load it with "
                              f"LibreYOLO({str(path)!r})")
        keypoints = meta.extra.get("num_keypoints")
        handle = cls(spec, meta.size, meta.task, meta.nc, normalize_names(meta.names, meta.nc), meta.imgsz, runtime,
                     ckpt_path=path, runtime=runtime, keypoints=None if keypoints is None else int(keypoints))
        handle._imgsz = handle.resolve_imgsz(int(imgsz) if imgsz else None)
        return handle

    def rebuilt(self, *, nc: int | None = None, names: Mapping[int, str] | None = None,
                keep_weights: bool = True, keypoints: int | None = None) -> ModelHandle:
        """A new handle for ``nc`` classes (and ``names``; a pose model also for ``keypoints`` per
        instance) on the same device, with a fresh network: with ``keep_weights`` every weight whose
        shape still fits is carried over (all but the class and keypoint outputs). This handle is
        left as it was."""
        self.require_pytorch("rebuild the network")
        nc = nc or self._nc
        names = normalize_names(names if names is not None else (self._names if nc == self._nc else None), nc)
        family = make_family(self._spec, self._size, self._task, nc, self._imgsz, keypoints or self.keypoints)
        net = family.build_network().to(self.device)
        if keep_weights:
            own, new_state = self._net.state_dict(), net.state_dict()
            net.load_state_dict({k: v for k, v in own.items() if k in new_state and new_state[k].shape == v.shape},
                                strict=False)
        return ModelHandle(self._spec, self._size, self._task, nc, names, self._imgsz, net, checkpoint=self._checkpoint,
                           ckpt_path=self._ckpt_path, fuse_default=self.fuse_default, family=family)

    def renamed(self, names: Mapping[int, str]) -> ModelHandle:
        """A new handle on the same network (not copied) under other class names; this handle
        should no longer be used (the two would share the network, and its quantization)."""
        handle = ModelHandle(self._spec, self._size, self._task, self._nc, normalize_names(names, self._nc),
                             self._imgsz, self._net, checkpoint=self._checkpoint, ckpt_path=self._ckpt_path,
                             runtime=self._runtime, fuse_default=self.fuse_default, family=self._family)
        handle.quantization = self.quantization
        return handle

    # ------------------------------------------------------------------ identity (read-only)
    @property
    def spec(self) -> FamilySpec:
        return self._spec

    @property
    def family(self) -> Family:
        return self._family

    @property
    def size(self) -> str:
        return self._size

    @property
    def task(self) -> str:
        return self._task

    @property
    def nc(self) -> int:
        return self._nc

    @property
    def names(self) -> dict[int, str]:
        """Class names by id (a copy: names change through the facade)."""
        return dict(self._names)

    @property
    def keypoints(self) -> int | None:
        """Keypoints per instance of a pose model; None for other tasks."""
        return self._family.keypoints

    @property
    def imgsz(self) -> int:
        """The model's default image size (checkpoints record it; predict and val use it)."""
        return self._imgsz

    @property
    def checkpoint(self) -> Mapping[str, Any]:
        """The checkpoint the weights came from (read-only; empty for an untrained model)."""
        return self._checkpoint

    @property
    def ckpt_path(self) -> Path | None:
        return self._ckpt_path

    @property
    def net(self) -> nn.Module:
        """The network (for an exported model, its runtime backend)."""
        return self._net

    @property
    def runtime(self) -> RuntimeNetwork | None:
        return self._runtime

    @property
    def task_spec(self) -> Task:
        """The task's declarations and verbs (data, metrics, results)."""
        return get_task(self._task)

    def _declare(self, spec: FamilySpec) -> None:
        """Swap the family's declarations (same family): the facade's hook for tests and tools
        that state a capture as verified. Jobs never call it."""
        self._spec = spec
        self._family.spec = spec

    def resolve_imgsz(self, imgsz: int | None = None, source: str = "imgsz") -> int:
        """The image size to letterbox to: ``imgsz``, else the model's, as a multiple of the stride;
        for an exported model also one its file runs at (a fixed-size export refuses the others
        here, before any image is read, naming the size it has and how to get another). The one
        place a job's ``imgsz`` default is resolved."""
        size = self._spec.check_imgsz(imgsz or self._imgsz, source, self._task)
        fixed = self._runtime.fixed_imgsz if self._runtime is not None else None
        if fixed is not None and size != fixed:
            decl = self._spec.task(self._task)
            how = (f"re-export from the .pt with dynamic=True (any multiple of {self.stride}) or imgsz={size}"
                   if decl.dynamic_imgsz else
                   f"re-export from the .pt with imgsz={size} ({self._spec.display_name} exports one size per file: "
                   f"{decl.dynamic_imgsz_note})")
            raise ConfigError(f"{source}={size}: {self._ckpt_path} was exported for imgsz={fixed} only; use "
                              f"imgsz={fixed}, or {how}")
        return size

    @property
    def stride(self) -> int:
        """The multiple image sides must be for this model's task (``FamilySpec.stride_for``)."""
        return self._spec.stride_for(self._task)

    def require_pytorch(self, action: str) -> None:
        """Refuse ``action`` (train, fuse, CUDA graphs, save) on an exported model, naming the way back."""
        if self._runtime is not None:
            raise ConfigError(f"cannot {action}: {self._ckpt_path} is an exported {self._runtime.kind} model, which "
                              "only predicts and validates; load the .pt checkpoint it was exported from for that")

    # ------------------------------------------------------------------ graph seams
    def inference_forward(self, images: Tensor, net: nn.Module | None = None) -> TensorTree:
        """The inference seam (what inference capture records); ``net`` defaults to ``self.net``
        (validation passes the EMA copy). An exported model runs its runtime backend instead.
        ``images``: ``[B, 3, S, S]`` in [0, 1] in the network's dtype, or the uint8 pixels of a
        letterbox (predict's), scaled here, inside what a graph captures. A quantized model takes
        [0, 1] images in any float dtype (validation's are fp32) and casts them to its own."""
        if images.dtype == torch.uint8:
            target = self._net if net is None else net
            images = to_network_input(images, next(target.parameters()).dtype, channels_last=is_channels_last(target))
        elif self.quantization is not None and images.is_floating_point():
            images = images.to(next((self._net if net is None else net).parameters()).dtype)
        if self._runtime is not None and (net is None or net is self._runtime):
            return self._runtime(images)
        return self._family.inference_forward(net if net is not None else self._net, images)

    def training_forward(self, images: Tensor) -> TensorTree:
        """The training seam (the network half that training capture records)."""
        self.require_pytorch("train")
        return self._family.training_forward(self._net, images)

    def training_module(self) -> nn.Module:
        """``training_forward`` as a module over ``net``: what training capture wraps."""
        return SeamModule(self._net, self.training_forward)

    def inference_module(self, net: nn.Module | None = None) -> nn.Module:
        """``inference_forward`` as a module over ``net`` (``self.net`` by default, or the fused
        copy); benchmarks compare eager, graphs and torch.compile on modules."""
        if net is None or net is self._net:
            return SeamModule(self._net, self.inference_forward)
        return SeamModule(net, lambda x: self.inference_forward(x, net=net))

    # ------------------------------------------------------------------ placement
    @property
    def device(self) -> torch.device:
        return next(self._net.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self._net.parameters()).dtype

    @property
    def runs_only_on(self) -> str | None:
        """The device type an exported file is bound to (a TorchScript trace), else None."""
        return self._runtime.runs_only_on if self._runtime is not None else None

    def to(self, device: str | int | torch.device) -> None:
        """Move the network; captured graphs are dropped when the device changes."""
        target = resolve_device(device)
        if target != self.device:
            self.drop_fused(f"device change {self.device} -> {target}")  # rebuilt there on demand
            self.graphs.invalidate(f"device change {self.device} -> {target}")
            self._net.to(target)

    def half(self) -> None:
        """fp16 weights (GPU inference); captured graphs are dropped. A fused copy is cast along
        (it was folded from the fp32 weights, so it rounds to fp16 once)."""
        self.require_pytorch("cast to fp16 (export with half=True instead)")
        if self.quantization is not None and self.quantization.recipe != "fp16":
            raise ConfigError(f"half=True / half(): the model is quantized ({self.quantization.recipe!r}); call "
                              "model.dequantize() first, or quantize('fp16') instead")
        self.cast_weights(torch.float16, "weights cast to float16")

    def cast_weights(self, dtype: torch.dtype, reason: str) -> None:
        """Cast the network and its fused copy (folded from the weights before the cast: rounded
        once) to ``dtype``; captured graphs are dropped for ``reason``."""
        if self.dtype != dtype:
            self.graphs.invalidate(reason)
            self._net.to(dtype)
            self._fused.to(dtype)

    def float(self) -> None:
        """fp32 weights; captured graphs and the fused copy (fp16 rounded) are dropped."""
        if self.quantization is not None:
            raise ConfigError(f"float(): the model is quantized ({self.quantization.recipe!r}); model.dequantize() "
                              "restores its fp32 weights exactly (a cast back would keep the rounding)")
        if self.dtype != torch.float32:
            self.drop_fused("weights cast to float32")
            self.graphs.invalidate("weights cast to float32")
            self._net.float()

    # ------------------------------------------------------------------ fusion
    def wants_fuse(self, request: bool | None = None) -> bool:
        """Whether inference runs fused: ``request`` if given, else ``fuse()``'s choice, else the
        family's declaration. An exported model never fuses (its runtime runs what was exported)."""
        if request is not None:
            if request:
                self.require_pytorch("fuse")
            return bool(request)
        if self._runtime is not None:
            return False
        if self.fuse_default is not None:
            return self.fuse_default
        return self._spec.task(self._task).inference_fuse

    def fused_net(self, channels_last: bool = False) -> nn.Module:
        """The fused inference copy of ``net`` (eval mode), built now if none is held or the held
        one was folded from weights that have changed since (``fused_net.FusedNetwork`` lists what
        is seen); ``channels_last``: its twin in that layout (the same weights)."""
        self.require_pytorch("fuse")
        if self._fused.stale(self._net):
            self.drop_fused("weights changed since the fused copy was built")
        if self._fused.net is None:
            self._fused.build(self._net)
        assert self._fused.net is not None  # built just above
        return self._fused.channels_last() if channels_last else self._fused.net

    def inference_net(self, fuse: bool | None = None) -> nn.Module:
        """The network inference runs: the fused copy when ``wants_fuse(fuse)`` (its channels_last
        twin when ``fused_channels_last``), else ``net`` as it is."""
        return self.fused_net(self.fused_channels_last) if self.wants_fuse(fuse) else self._net

    @property
    def fused_channels_last(self) -> bool:
        """Whether fused inference runs in channels_last: with fp16 weights on CUDA, eager and
        graphed alike (a graph replays exactly what the eager call computes; docs/benchmarks.md
        has the H200 readings that chose it: fp16 gains in that layout, fp32 does not)."""
        return self._runtime is None and self.device.type == "cuda" and self.dtype == torch.float16

    @property
    def fused(self) -> bool:
        """True while a current fused inference copy is held."""
        return self._fused.net is not None and not self._fused.stale(self._net)

    @property
    def fused_copy(self) -> nn.Module | None:
        """The fused copy held now (possibly stale), for inspection; None when none is held."""
        return self._fused.net

    def drop_fused(self, reason: str) -> None:
        """Forget the fused copy and its graphs (weights changed, or ``fuse(False)``); the next fused
        inference builds a new one from the weights of then."""
        if self._fused.drop():
            self.graphs.release_fused()
            log.debug("fused inference copy dropped: %s", reason)

    # ------------------------------------------------------------------ description and saving
    def n_parameters(self) -> int:
        return sum(p.numel() for p in self._net.parameters())

    def info(self) -> dict[str, Any]:
        """Family, size, task, classes, image size, parameter count, device, source checkpoint."""
        decl = self._spec.task(self._task)
        return {"family": self._spec.name, "model": self._spec.weight_name(self._size, self._task, ""),
                "size": self._size, "task": self._task, "nc": self._nc, "imgsz": self._imgsz,
                **({} if self.keypoints is None else {"keypoints": self.keypoints}),
                "parameters": self.n_parameters(), "device": str(self.device), "dtype": str(self.dtype),
                "fused": self.fused, "fuse_by_default": self.wants_fuse(),
                "checkpoint": str(self._ckpt_path) if self._ckpt_path else None, "loss_names": list(decl.loss_names),
                "inference_capture_verified": decl.inference_capture, "train_capture_verified": decl.train_capture,
                "exportable": decl.exportable, "quantized": self.quantization.recipe if self.quantization else None,
                **(self._runtime.describe() if self._runtime is not None else {})}

    def state_for_checkpoint(self, weights: dict[str, Tensor] | None = None, *,
                             imgsz: int | None = None) -> dict[str, Any]:
        """The schema's metadata plus the network weights (CPU tensors): ``weights`` when the
        caller already copied them (the trainer saves the EMA's), else this network's; ``imgsz``:
        the size the weights were trained at, when it is not the handle's."""
        self.require_pytorch("save a checkpoint")
        if self.quantization is not None:
            raise ConfigError(f"cannot save a checkpoint of a model quantized to {self.quantization.recipe!r}: a "
                              "checkpoint holds fp32 training weights. Call model.dequantize() first to save those, "
                              "or model.export(...) to write the quantized network")
        meta = checkpoint_metadata(family=self._spec.name, size=self._size, task=self._task, nc=self._nc,
                                   names=self._names, imgsz=imgsz or self._imgsz, version=__version__,
                                   keypoints=self.keypoints)
        meta["model"] = cpu_state_dict(self._net) if weights is None else weights
        if CERTIFICATE_KEY in self._checkpoint:  # the record of the run that made these weights travels with them
            meta[CERTIFICATE_KEY] = dict(self._checkpoint[CERTIFICATE_KEY])
        return meta

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickles as its checkpoint (CPU tensors): how multi-GPU workers receive the model."""
        return (_unpickle, (self.state_for_checkpoint(), str(self._ckpt_path) if self._ckpt_path else None,
                            self.fuse_default))

    def __repr__(self) -> str:
        return (f"{self._spec.name}-{self._size} {self._task}, nc={self._nc}, imgsz={self._imgsz}, "
                f"device={self.device}, params={self.n_parameters():,}")


class SeamModule(nn.Module):
    """Holds the network as a submodule (so DDP, graph capture and compile see its parameters)
    and runs one of the graph seams."""

    def __init__(self, net: nn.Module, seam: Any) -> None:
        super().__init__()
        self.net = net
        self._seam = seam  # a bound method of a non-module: not registered as a submodule

    def forward(self, images: Tensor) -> Any:
        return self._seam(images)


def make_family(spec: FamilySpec, size: str, task: str, nc: int, imgsz: int, keypoints: int | None) -> Family:
    """The family implementation for one model; ``keypoints`` is passed only when given (pose), so
    families without keypoint tasks need not take it."""
    extra = {} if keypoints is None else {"keypoints": int(keypoints)}
    return spec.family_class()(spec, size, task, nc, (imgsz, imgsz), **extra)


def warn_nonfinite(state: Mapping[str, Tensor], source: str, masks: Collection[str] = ()) -> None:
    """One warning when loaded weights hold NaN or inf (beyond ``masks``, the network's own inf
    masks): such a model predicts nothing useful, and it usually comes from a diverged run."""
    bad = nonfinite_entries(state, masks)
    if bad:
        log.warning("%s: %d of %d weight tensors hold NaN or inf (e.g. %s); this model will not predict anything "
                    "useful. It comes from a diverged training run: use an earlier checkpoint, or train again "
                    "with a lower lr0", source, len(bad), len(state), bad[0])


def normalize_names(names: Mapping[int, str] | list[str] | tuple[str, ...] | None, nc: int) -> dict[int, str]:
    """Class names as ``{id: name}`` covering ``0..nc-1`` exactly (COCO's for 80 when None)."""
    if names is None:
        return default_names(nc)
    table = dict(enumerate(names)) if isinstance(names, list | tuple) else {int(k): str(v) for k, v in names.items()}
    if sorted(table) != list(range(nc)):
        raise ConfigError(f"names must cover class ids 0..{nc - 1} exactly; got ids {sorted(table)[:10]}")
    return table


def _unpickle(ckpt: dict[str, Any], path: str | None, fuse_default: bool | None) -> ModelHandle:
    return ModelHandle.from_source(rebuild_source(ckpt, path), fuse_default=fuse_default)
