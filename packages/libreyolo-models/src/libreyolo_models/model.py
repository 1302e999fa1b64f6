"""``LibreYOLO``: the one class users touch. ``LibreYOLO("LibreYOLO9t.pt")`` returns the family's
subclass (``LibreYOLO9``) loaded from a checkpoint, a weights name, or an architecture spec.

Family subclasses add only architecture: the network builder and the three graph seams
(``forward_tensors`` for inference capture, ``train_forward`` for training capture,
``compute_loss`` as the eager remainder both training paths call) and post-processing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import torch
import yaml
from torch import Tensor, nn

from . import __version__
from .checkpoint import atomic_save, checkpoint_metadata, cpu_state_dict, extract_state_dict, load_checkpoint
from .coco_names import default_names
from .config import load_config, suggest
from .devices import resolve_device
from .errors import CheckpointError, ConfigError, UnknownFamilyError
from .family_spec import FamilySpec
from .settings import PredictConfig, check_imgsz

log = logging.getLogger(__name__)


def _is_arch_spec(model: object) -> bool:
    return isinstance(model, str | Path) and Path(model).suffix.lower() in (".yaml", ".yml")


class LibreYOLO:
    """A YOLO-family model: predict, train, validate, save, and graph-capture.

    Args:
        model: a checkpoint path, a weights name (``"LibreYOLO9t.pt"``: local, then the weights
            folder, then the hub), an architecture spec (``"LibreYOLO9t.yaml"``: a file with
            ``family``/``size``/``nc``/``names`` keys, or just that name) for an untrained model,
            or None with ``size=`` on a family class (``LibreYOLO9(size="s", nc=3)``).
        size: size of an untrained model (family classes only).
        nc: number of classes of an untrained model (default 80).
        names: class names of an untrained model (default COCO for 80 classes).
        imgsz: default image size (family default when omitted).
        device: where to put the network (default: CPU).
    """

    spec: ClassVar[FamilySpec]

    def __new__(cls, model: str | Path | None = None, **kwargs: Any) -> LibreYOLO:
        if cls is not LibreYOLO:
            return super().__new__(cls)
        if model is None:
            raise ConfigError("LibreYOLO() needs a model: a checkpoint path, a weights name such as "
                              "'LibreYOLO9t.pt', or an architecture such as 'LibreYOLO9t.yaml'")
        family, preloaded = _family_for(model)
        obj = super().__new__(family)
        obj._preloaded = preloaded
        return obj

    def __init__(self, model: str | Path | None = None, *, size: str | None = None, nc: int | None = None,
                 names: Mapping[int, str] | list[str] | None = None, imgsz: int | None = None,
                 device: str | int | torch.device | None = None) -> None:
        preloaded = self.__dict__.pop("_preloaded", None)
        self.task = "detect"
        self.ckpt_path: Path | None = None
        self.checkpoint: dict[str, Any] = {}
        self._graphs: Any = None
        self.metrics: Any = None
        if model is None or _is_arch_spec(model):
            arch = _read_arch_spec(model, type(self)) if model is not None else {}
            self._build(size=arch.get("size", size or self.spec.default_size),
                        nc=arch.get("nc", nc or 80), names=arch.get("names", names),
                        imgsz=arch.get("imgsz", imgsz))
        else:
            if size is not None or nc is not None or names is not None:
                raise ConfigError(f"size/nc/names describe an untrained model; {str(model)!r} is a weights file "
                                  "whose checkpoint sets them")
            path, ckpt = preloaded if preloaded else _load_weights(model, type(self))
            self._build_from_checkpoint(ckpt, str(path))
            self.ckpt_path = Path(path)
            if imgsz is not None:
                self.imgsz = check_imgsz(imgsz)
        if device is not None:
            self.to(device)

    # ----------------------------------------------------------------- construction
    def _build(self, *, size: str, nc: int, names: Mapping[int, str] | list[str] | None, imgsz: int | None) -> None:
        if size not in self.spec.sizes:
            raise ConfigError(f"{self.spec.display_name} has no size {size!r}; sizes: {', '.join(self.spec.sizes)}"
                              + suggest(str(size), self.spec.sizes))
        if not isinstance(nc, int) or nc < 1:
            raise ConfigError(f"nc={nc!r} must be a positive number of classes")
        self.size, self.nc = size, nc
        self.names = _normalize_names(names, nc)
        self.imgsz = check_imgsz(imgsz or self.spec.default_imgsz)
        self.net = self.build_net(size, nc)
        self.fused = False

    def _build_from_checkpoint(self, ckpt: Mapping[str, Any], source: str) -> None:
        state = extract_state_dict(ckpt, source)
        family = ckpt.get("model_family", self.spec.name)
        if family != self.spec.name:
            raise CheckpointError(f"{source}: checkpoint is for family {family!r}, not {self.spec.name!r}; "
                                  f"load it with LibreYOLO({source!r})")
        task = ckpt.get("task", "detect")
        if task not in self.spec.tasks:
            raise CheckpointError(f"{source}: task {task!r} is not supported by {self.spec.display_name} "
                                  f"(tasks: {', '.join(self.spec.tasks)})")
        size = ckpt.get("size") or self.infer_size(state, source)
        nc = int(ckpt.get("nc") or self.infer_nc(state))
        self._build(size=size, nc=nc, names=ckpt.get("names"), imgsz=ckpt.get("imgsz"))
        self._load_state(state, source)
        self.checkpoint = dict(ckpt)

    def _load_state(self, state: Mapping[str, Tensor], source: str) -> None:
        own = self.net.state_dict()
        missing = [k for k in own if k not in state]
        unexpected = [k for k in state if k not in own]
        wrong = [f"{k} {tuple(state[k].shape)} vs {tuple(v.shape)}" for k, v in own.items()
                 if k in state and state[k].shape != v.shape]
        if missing or unexpected or wrong:
            raise CheckpointError(
                f"{source}: weights do not fit {self.spec.display_name}-{self.size} (nc={self.nc}): "
                f"{len(missing)} missing keys (e.g. {missing[:3]}), {len(unexpected)} unexpected "
                f"(e.g. {unexpected[:3]}), {len(wrong)} of another shape (e.g. {wrong[:2]}). "
                "Is the checkpoint for another size or family?")
        self.net.load_state_dict(state)

    def load(self, weights: str | Path) -> LibreYOLO:
        """Load weights into this model (same family; size and nc come from the checkpoint).

        Any captured CUDA graph is dropped first: graphs bake in parameter addresses.
        """
        path, ckpt = _load_weights(weights, type(self))
        device = self.device
        self.invalidate_cuda_graph(f"new weights loaded from {path}")
        if self._graphs is not None:  # the network object is rebuilt: the runner must not outlive it
            self._graphs.release()
            self._graphs = None
        self._build_from_checkpoint(ckpt, str(path))
        self.ckpt_path = Path(path)
        self.net.to(device)
        return self

    # ----------------------------------------------------------------- family hooks
    def build_net(self, size: str, nc: int) -> nn.Module:
        raise NotImplementedError

    def infer_size(self, state: Mapping[str, Tensor], source: str) -> str:
        raise CheckpointError(f"{source}: checkpoint has no 'size'; load it through the family class with size=")

    def infer_nc(self, state: Mapping[str, Tensor]) -> int:
        raise NotImplementedError

    def forward_tensors(self, images: Tensor, net: nn.Module | None = None) -> Tensor:
        """Inference graph seam: images -> the one tensor post-processing reads.

        ``net`` defaults to ``self.net``; validation passes the EMA copy.
        """
        raise NotImplementedError

    def train_forward(self, images: Tensor) -> list[Tensor]:
        """Training graph seam: images -> the tensors the loss reads (network half only)."""
        raise NotImplementedError

    def training_module(self) -> nn.Module:
        """``train_forward`` as a module over ``self.net``: what DDP and training capture wrap."""
        return _SeamModule(self, self.train_forward)

    def inference_module(self) -> nn.Module:
        """``forward_tensors`` as a module over ``self.net`` (for tools that take a module, such
        as benchmarks comparing eager, graphs and torch.compile)."""
        return _SeamModule(self, self.forward_tensors)

    def postprocess(self, outputs: Tensor, *, conf: float, iou: float, max_det: int,
                    classes: list[int] | None) -> list[Tensor]:
        raise NotImplementedError

    # ----------------------------------------------------------------- state
    @property
    def device(self) -> torch.device:
        return next(self.net.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.net.parameters()).dtype

    def to(self, device: str | int | torch.device) -> LibreYOLO:
        """Move the network; captured graphs are dropped when the device changes."""
        target = resolve_device(device)
        if target != self.device:
            self.invalidate_cuda_graph(f"device change {self.device} -> {target}")
            self.net.to(target)
        return self

    def half(self) -> LibreYOLO:
        """fp16 weights (GPU inference); captured graphs are dropped."""
        if self.dtype != torch.float16:
            self.invalidate_cuda_graph("weights cast to float16")
            self.net.half()
        return self

    def float(self) -> LibreYOLO:
        """fp32 weights; captured graphs are dropped."""
        if self.dtype != torch.float32:
            self.invalidate_cuda_graph("weights cast to float32")
            self.net.float()
        return self

    def eval(self) -> LibreYOLO:
        self.net.eval()
        return self

    def fuse(self) -> LibreYOLO:
        """Fold BatchNorm into the convolutions and merge re-parameterizable branches, in place.

        Fewer, larger kernels: faster inference, eager or graphed, at the same results up to
        rounding (not bit for bit; see ``layers.fuse``). One-way: a fused model predicts and
        validates but cannot train or be saved; ``load()`` brings back the unfused network.
        """
        if not self.fused:
            from .layers.fuse import fuse_network

            self.invalidate_cuda_graph("network fused for inference")
            fuse_network(self.net)
            self.fused = True
        return self

    def require_unfused(self, action: str) -> None:
        """Refuse ``action`` (training, saving) on a fused network, naming the way back."""
        if self.fused:
            source = f"LibreYOLO({str(self.ckpt_path)!r})" if self.ckpt_path else "a fresh model"
            raise ConfigError(f"cannot {action}: this model was fused for inference (model.fuse() or fuse=True), "
                              f"which folds its BatchNorm layers away; use {source} or model.load(weights) "
                              "for an unfused copy")

    def n_parameters(self) -> int:
        return sum(p.numel() for p in self.net.parameters())

    def info(self) -> dict[str, Any]:
        """Family, size, task, classes, image size, parameter count, device, source checkpoint."""
        return {"family": self.spec.name, "model": self.spec.weight_name(self.size, self.task, ""),
                "size": self.size, "task": self.task, "nc": self.nc, "imgsz": self.imgsz,
                "parameters": self.n_parameters(), "device": str(self.device), "dtype": str(self.dtype),
                "fused": self.fused,
                "checkpoint": str(self.ckpt_path) if self.ckpt_path else None,
                "inference_capture_verified": self.spec.inference_capture_verified,
                "train_capture_verified": self.spec.train_capture_verified}

    def state_for_checkpoint(self, weights: dict[str, Tensor] | None = None) -> dict[str, Any]:
        """The schema's metadata plus the network weights (CPU tensors): ``weights`` when the
        caller already copied them (the trainer saves the EMA's), else this network's."""
        self.require_unfused("save a checkpoint")
        meta = checkpoint_metadata(family=self.spec.name, size=self.size, task=self.task, nc=self.nc,
                                   names=self.names, imgsz=self.imgsz, version=__version__)
        meta["model"] = cpu_state_dict(self.net) if weights is None else weights
        return meta

    def save(self, path: str | Path) -> Path:
        """Write an upstream-compatible checkpoint atomically."""
        return atomic_save(self.state_for_checkpoint(), path)

    # ----------------------------------------------------------------- user verbs
    def predict(self, source: object, **options: Any) -> list:
        """Detect objects in ``source`` (see ``predict.sources`` for what it may be).

        Options (``PredictConfig``): conf, iou, imgsz, classes, max_det, batch, save, device,
        half, fuse (see ``fuse()``), cuda_graph (False | True | "auto"), project, name, verbose.
        Returns one ``Results`` per image.
        """
        from .predict.predictor import run_prediction

        cfg = load_config(PredictConfig, options, f"{type(self).__name__}.predict()")
        return run_prediction(self, source, cfg)

    __call__ = predict

    def train(self, **options: Any) -> Any:
        """Train on ``data`` (see ``train.settings.TrainConfig``); the instance ends with the best weights."""
        from .train.entry import train_model

        return train_model(self, options)

    def val(self, **options: Any) -> Any:
        """Validate on ``data``'s ``split`` (see ``val.settings.ValConfig``); returns the metrics."""
        from .val.entry import validate_model

        return validate_model(self, options)

    # ----------------------------------------------------------------- CUDA graphs
    def capture_graph(self, imgsz: int | None = None, batch: int = 1, dtype: torch.dtype | None = None) -> dict:
        """Capture the inference graph for ``batch x 3 x imgsz x imgsz`` ahead of the first request."""
        from .graphs import graphs_for

        return graphs_for(self).capture(imgsz=imgsz or self.imgsz, batch=batch, dtype=dtype)

    def graph_info(self) -> dict[str, Any]:
        """Whether capture is supported here, the captured graphs, replay counts, and the mode."""
        from .graphs import describe_graphs

        return describe_graphs(self)

    def release_graphs(self) -> None:
        """Free every captured inference graph and its memory."""
        if self._graphs is not None:
            self._graphs.release()

    def invalidate_cuda_graph(self, reason: str) -> None:
        """Drop captured graphs because what they captured changed (weights, device, dtype, a
        head branch switched on); the next call recaptures per the mode. Family hooks that change
        the captured region during training call this too."""
        if self._graphs is not None:
            self._graphs.invalidate(reason)
        if getattr(self, "_train_graphs", None) is not None:
            self._train_graphs.invalidate(reason)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(size={self.size!r}, nc={self.nc}, imgsz={self.imgsz}, "
                f"device={self.device}, params={self.n_parameters():,})")


class _SeamModule(nn.Module):
    """Holds the network as a submodule (so DDP, graph capture and compile see its parameters)
    and runs one of the family's graph seams."""

    def __init__(self, owner: LibreYOLO, seam: Any) -> None:
        super().__init__()
        self.net = owner.net
        self._seam = seam  # a bound method of a non-module: not registered as a submodule

    def forward(self, images: Tensor) -> Any:
        return self._seam(images)


def _normalize_names(names: Mapping[int, str] | list[str] | tuple[str, ...] | None, nc: int) -> dict[int, str]:
    if names is None:
        return default_names(nc)
    table = dict(enumerate(names)) if isinstance(names, list | tuple) else {int(k): str(v) for k, v in names.items()}
    if sorted(table) != list(range(nc)):
        raise ConfigError(f"names must cover class ids 0..{nc - 1} exactly; got ids {sorted(table)[:10]}")
    return table


def _read_arch_spec(model: str | Path, family: type[LibreYOLO]) -> dict[str, Any]:
    """An architecture spec: a YAML file (safe_load) or just a name like ``LibreYOLO9t.yaml``."""
    from .registry import parse_model_name

    path = Path(model)
    if path.is_file():
        with path.open() as fh:
            data = yaml.safe_load(fh) or {}
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a mapping with family/size/nc/names keys")
        unknown = set(data) - {"family", "size", "nc", "names", "imgsz"}
        if unknown:
            key = sorted(unknown)[0]
            raise ConfigError(f"{path}: unknown key {key!r}" + suggest(key, ["family", "size", "nc", "names", "imgsz"]))
        if data.get("family", family.spec.name) != family.spec.name:
            raise ConfigError(f"{path}: family {data['family']!r} does not match {family.spec.name!r}")
        if "nc" not in data and "names" in data:
            data["nc"] = len(data["names"])
        return data
    parsed = parse_model_name(path.name)
    if parsed.family is not family:
        raise UnknownFamilyError(f"{path.name!r} names family {parsed.family.spec.name!r}, not {family.spec.name!r}")
    return {"size": parsed.size}


def _load_weights(model: str | Path, family: type[LibreYOLO] | None) -> tuple[Path, dict[str, Any]]:
    """Resolve and read weights; only names a family recognizes are fetched from the hub."""
    from .hub import resolve_weights
    from .registry import families

    known = family or next(iter(families().values()))
    hint = (f"LibreYOLO({known.spec.weight_name(known.spec.default_size, suffix='.yaml')!r}) or "
            f"{known.__name__}(size={known.spec.default_size!r}, nc=...)")
    if Path(str(model)).name == str(model) and not Path(model).exists():
        try:
            from .registry import parse_model_name

            parsed = parse_model_name(model)
            hint = (f"LibreYOLO({parsed.family.spec.weight_name(parsed.size, parsed.task, '.yaml')!r}) or "
                    f"{parsed.family.__name__}(size={parsed.size!r}, nc=...)")
        except UnknownFamilyError:
            pass
    path = resolve_weights(model, untrained_hint=hint, download=family is not None)
    return path, load_checkpoint(path)


def _family_for(model: str | Path) -> tuple[type[LibreYOLO], tuple[Path, dict[str, Any]] | None]:
    """Which family class ``LibreYOLO(model)`` builds, and the checkpoint if it had to be read."""
    from .registry import families, get_family, parse_model_name

    if _is_arch_spec(model):
        path = Path(model)
        if path.is_file():
            with path.open() as fh:
                data = yaml.safe_load(fh) or {}
            if isinstance(data, dict) and "family" in data:
                return get_family(str(data["family"])), None
        return parse_model_name(path.name).family, None
    # Weights: the checkpoint's own metadata is authoritative; the file name is the fallback.
    family_guess = None
    try:
        family_guess = parse_model_name(Path(str(model)).name).family
    except UnknownFamilyError:
        known_prefix = any(Path(str(model)).name.lower().startswith(c.spec.weight_prefix.lower())
                           for c in families().values())
        if known_prefix and not Path(str(model)).exists():
            raise  # a family's name with a size or task it does not have: say so, don't download
    path, ckpt = _load_weights(model, family_guess)
    if "model_family" in ckpt:
        return get_family(str(ckpt["model_family"])), (path, ckpt)
    if family_guess is None:
        raise UnknownFamilyError(f"{str(path)!r} has no 'model_family' entry and its name does not say; "
                                 "load it through the family class, e.g. LibreYOLO9('file.pt')")
    return family_guess, (path, ckpt)
