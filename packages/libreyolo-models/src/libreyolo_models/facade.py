"""``LibreYOLO``: the one class users touch. It holds a family (composition, not inheritance),
the family's network, and the model's identity (size, task, classes, image size).

    model = LibreYOLO("LibreYOLO9t.pt")                 # weights by name, path, or checkpoint
    model = LibreYOLO("LibreYOLO9s.yaml")               # untrained architecture
    model = LibreYOLO(family="yolo9", size="m", nc=3)   # the same, from arguments
    results = model("image.jpg")
    model.train(data="shapes", epochs=10)
    model.export(format="onnx")                         # then LibreYOLO("LibreYOLO9t.onnx") predicts
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from .checkpoint import atomic_save, checkpoint_metadata, cpu_state_dict
from .coco_names import default_names
from .config import load_config
from .contract.family import Family, TensorTree
from .contract.spec import FamilySpec
from .data.letterbox import to_network_input
from .devices import resolve_device
from .errors import ConfigError
from .fused_net import FusedNetwork
from .graphs import ModelGraphs, capture_ahead
from .layers.layout import is_channels_last
from .runtime import RuntimeNetwork, is_exported, load_exported
from .settings import PredictConfig
from .tasks import Task, get_task
from .version import __version__
from .zoo.building import ModelSource, resolve_source

if TYPE_CHECKING:
    from .tasks.results import Results
    from .track.session import TrackSession

log = logging.getLogger(__name__)


class LibreYOLO:
    """A model of the zoo: predict, train, validate, save, export and graph-capture.

    Args:
        model: a checkpoint path, a weights name (``"LibreYOLO9t.pt"``: local, then the weights
            folder, then the hub), an architecture spec (``"LibreYOLO9t.yaml"``: a file with
            ``family``/``size``/``task``/``nc``/``names``/``imgsz`` keys, or just that name), or
            None with ``family=`` for an untrained model. An exported model (``best.onnx``,
            ``best.torchscript``, an OpenVINO folder) loads on its runtime: it predicts and
            validates, but does not train, fuse or capture CUDA graphs.
        family: family name (``"yolo9"``) for an untrained model, or to say which family a
            checkpoint without metadata belongs to.
        size: size of an untrained model (default: the family's).
        task: task of an untrained model (default: the family's first).
        nc: number of classes of an untrained model (default 80, or ``len(names)``).
        names: class names of an untrained model (default COCO for 80 classes).
        imgsz: default image size (family default when omitted).
        device: where to put the network (default: CPU).
    """

    def __init__(self, model: str | Path | None = None, *, family: str | FamilySpec | None = None,
                 size: str | None = None, task: str | None = None, nc: int | None = None,
                 names: Mapping[int, str] | list[str] | None = None, imgsz: int | None = None,
                 device: str | int | torch.device | None = None) -> None:
        self.metrics: Any = None
        if is_exported(model):
            if size is not None or nc is not None or names is not None or task is not None:
                raise ConfigError(f"size/task/nc/names describe an untrained model; {str(model)!r} is an exported "
                                  "model whose metadata sets them")
            self._assemble_exported(Path(str(model)), family, imgsz)
        else:
            self._assemble(resolve_source(model, family=family, size=size, task=task, nc=nc, names=names,
                                          imgsz=imgsz))
        if device is not None:
            self.to(device)

    def _assemble(self, source: ModelSource) -> None:
        """Build family and network from ``source`` and load its weights, if any."""
        spec = source.spec
        if not isinstance(source.nc, int) or isinstance(source.nc, bool) or source.nc < 1:
            raise ConfigError(f"nc={source.nc!r} must be a positive number of classes")
        self.spec: FamilySpec = spec
        self.size, self.task, self.nc = source.size, source.task, source.nc
        self.names = _normalize_names(source.names, source.nc)
        self.imgsz = spec.check_imgsz(int(source.imgsz or spec.default_imgsz(self.size, self.task)))
        self.family: Family = spec.family_class()(spec, self.size, self.task, self.nc)
        self.net: nn.Module = self.family.build_network()
        self._fused = FusedNetwork()
        # fuse(True/False) sets it (kept across load()); None: the family's declaration decides
        self.fuse_default: bool | None = getattr(self, "fuse_default", None)
        self.graphs = ModelGraphs(self)
        self.checkpoint: dict[str, Any] = source.checkpoint
        self.ckpt_path: Path | None = source.path
        self.runtime: RuntimeNetwork | None = None
        self.track_session: TrackSession | None = None   # what track(persist=True) continues
        if source.state is not None:
            self.family.check_state(self.net, source.state, str(source.path))
            self.net.load_state_dict(source.state)

    def _assemble_exported(self, path: Path, family: str | FamilySpec | None, imgsz: int | None) -> None:
        """The family (for post-processing) around a runtime backend (instead of a network)."""
        from .zoo.registry import get_family

        runtime = load_exported(path)
        meta = runtime.meta
        spec = get_family(meta.family)
        wanted = get_family(family) if isinstance(family, str) else family
        if wanted is not None and wanted.name != spec.name:
            raise ConfigError(f"{path} is an exported {spec.name} model, not {wanted.name}; load it with "
                              f"LibreYOLO({str(path)!r})")
        self.spec, self.size, self.task, self.nc = spec, meta.size, meta.task, meta.nc
        self.names = _normalize_names(meta.names, meta.nc)
        self.family = spec.family_class()(spec, self.size, self.task, self.nc)
        self.net = self.runtime = runtime
        self._fused = FusedNetwork()
        self.fuse_default = None
        self.graphs = ModelGraphs(self)
        self.checkpoint, self.ckpt_path = {}, path
        self.track_session = None
        self.imgsz = meta.imgsz
        self.imgsz = self.resolve_imgsz(int(imgsz) if imgsz else None)

    def resolve_imgsz(self, imgsz: int | None = None, source: str = "imgsz") -> int:
        """The image size to letterbox to: ``imgsz``, else the model's, as a multiple of the stride;
        for an exported model also one its file runs at (a fixed-size export refuses the others
        here, before any image is read, naming the size it has and how to get another)."""
        size = self.spec.check_imgsz(imgsz or self.imgsz, source)
        fixed = self.runtime.fixed_imgsz if self.runtime is not None else None
        if fixed is not None and size != fixed:
            decl = self.spec.task(self.task)
            how = (f"re-export from the .pt with dynamic=True (any multiple of {self.spec.stride}) or imgsz={size}"
                   if decl.dynamic_imgsz else
                   f"re-export from the .pt with imgsz={size} ({self.spec.display_name} exports one size per file: "
                   f"{decl.dynamic_imgsz_note})")
            raise ConfigError(f"{source}={size}: {self.ckpt_path} was exported for imgsz={fixed} only; use "
                              f"imgsz={fixed}, or {how}")
        return size

    def require_pytorch(self, action: str) -> None:
        """Refuse ``action`` (train, fuse, CUDA graphs, save) on an exported model, naming the way back."""
        if self.runtime is not None:
            raise ConfigError(f"cannot {action}: {self.ckpt_path} is an exported {self.runtime.kind} model, which "
                              "only predicts and validates; load the .pt checkpoint it was exported from for that")

    @property
    def task_spec(self) -> Task:
        """The task's declarations and verbs (data, metrics, results)."""
        return get_task(self.task)

    def rebuild(self, *, nc: int | None = None, keep_weights: bool = True) -> None:
        """A new network (and family) for ``nc`` classes on the same device. With ``keep_weights``
        every weight whose shape still fits is carried over (all but the class outputs)."""
        self.require_pytorch("rebuild the network")
        device, old_state = self.device, self.net.state_dict()
        self.drop_fused("network rebuilt")
        self.graphs.invalidate("network rebuilt")
        self.graphs.release()
        self.nc = nc or self.nc
        self.family = self.spec.family_class()(self.spec, self.size, self.task, self.nc)
        self.net = self.family.build_network().to(device)
        if keep_weights:
            new_state = self.net.state_dict()
            kept = {k: v for k, v in old_state.items() if k in new_state and new_state[k].shape == v.shape}
            self.net.load_state_dict(kept, strict=False)

    def load(self, weights: str | Path) -> LibreYOLO:
        """Load weights into this model (same family; size, task and nc come from the checkpoint).

        Captured graphs are dropped first: graphs bake in parameter addresses.
        """
        self.require_pytorch("load PyTorch weights into it")
        source = resolve_source(weights, family=self.spec)
        device = self.device
        self.drop_fused(f"new weights loaded from {source.path}")
        self.graphs.invalidate(f"new weights loaded from {source.path}")
        self.graphs.release()
        self._assemble(source)
        self.net.to(device)
        return self

    # ----------------------------------------------------------------- graph seams
    def inference_forward(self, images: Tensor, net: nn.Module | None = None) -> TensorTree:
        """The inference seam (what inference capture records); ``net`` defaults to ``self.net``
        (validation passes the EMA copy). An exported model runs its runtime backend instead.
        ``images``: ``[B, 3, S, S]`` in [0, 1] in the network's dtype, or the uint8 pixels of a
        letterbox (predict's), scaled here, inside what a graph captures."""
        if images.dtype == torch.uint8:
            target = self.net if net is None else net
            images = to_network_input(images, next(target.parameters()).dtype, channels_last=is_channels_last(target))
        if self.runtime is not None and (net is None or net is self.runtime):
            return self.runtime(images)
        return self.family.inference_forward(net if net is not None else self.net, images)

    def training_forward(self, images: Tensor) -> TensorTree:
        """The training seam (the network half that training capture records)."""
        self.require_pytorch("train")
        return self.family.training_forward(self.net, images)

    def training_module(self) -> nn.Module:
        """``training_forward`` as a module over ``self.net``: what training capture wraps."""
        return _SeamModule(self.net, self.training_forward)

    def inference_module(self, net: nn.Module | None = None) -> nn.Module:
        """``inference_forward`` as a module over ``net`` (``self.net`` by default, or the fused
        copy); benchmarks compare eager, graphs and torch.compile on modules."""
        if net is None or net is self.net:
            return _SeamModule(self.net, self.inference_forward)
        return _SeamModule(net, lambda x: self.inference_forward(x, net=net))

    # ----------------------------------------------------------------- state
    @property
    def device(self) -> torch.device:
        return next(self.net.parameters()).device

    @property
    def runs_only_on(self) -> str | None:
        """The device type an exported file is bound to (a TorchScript trace), else None."""
        return self.runtime.runs_only_on if self.runtime is not None else None

    @property
    def dtype(self) -> torch.dtype:
        return next(self.net.parameters()).dtype

    def to(self, device: str | int | torch.device) -> LibreYOLO:
        """Move the network; captured graphs are dropped when the device changes."""
        target = resolve_device(device)
        if target != self.device:
            self.drop_fused(f"device change {self.device} -> {target}")  # rebuilt there on demand
            self.graphs.invalidate(f"device change {self.device} -> {target}")
            self.net.to(target)
        return self

    def half(self) -> LibreYOLO:
        """fp16 weights (GPU inference); captured graphs are dropped. A fused copy is cast along
        (it was folded from the fp32 weights, so it rounds to fp16 once)."""
        self.require_pytorch("cast to fp16 (export with half=True instead)")
        if self.dtype != torch.float16:
            self.graphs.invalidate("weights cast to float16")
            self.net.half()
            self._fused.half()
        return self

    def float(self) -> LibreYOLO:
        """fp32 weights; captured graphs and the fused copy (fp16 rounded) are dropped."""
        if self.dtype != torch.float32:
            self.drop_fused("weights cast to float32")
            self.graphs.invalidate("weights cast to float32")
            self.net.float()
        return self

    def eval(self) -> LibreYOLO:
        self.net.eval()
        return self

    # ----------------------------------------------------------------- fusion
    def fuse(self, enable: bool = True) -> LibreYOLO:
        """Choose whether predict, track and streams run the fused network by default.

        Fusing folds BatchNorm into the convolutions and merges re-parameterizable branches:
        fewer, larger kernels, the same results up to rounding (not bit for bit; see
        ``layers.fuse``). It happens on a separate inference copy (``fused_net()``), so the model
        still trains and saves; the copy is rebuilt when the weights change (see ``fused_net``
        for what is detected). ``fuse(True)`` folds the current weights now; ``fuse(False)`` drops it and makes the exact unfused forward the default. Without
        either call the family decides (``TaskDecl.inference_fuse``). A ``fuse=`` option of one
        ``predict``/``val`` call wins over both.
        """
        self.require_pytorch("fuse")
        self.fuse_default = bool(enable)
        if enable:
            self.drop_fused("fuse(True) folds anew")
            self.fused_net()
        else:
            self.drop_fused("fuse(False)")
        return self

    def wants_fuse(self, request: bool | None = None) -> bool:
        """Whether inference runs fused: ``request`` if given, else ``fuse()``'s choice, else the
        family's declaration. An exported model never fuses (its runtime runs what was exported)."""
        if request is not None:
            if request:
                self.require_pytorch("fuse")
            return bool(request)
        if self.runtime is not None:
            return False
        if self.fuse_default is not None:
            return self.fuse_default
        return self.spec.task(self.task).inference_fuse

    def fused_net(self, channels_last: bool = False) -> nn.Module:
        """The fused inference copy of ``net`` (eval mode), built now if none is held or the held one
        was folded from weights that have changed since. ``channels_last``: its twin in that
        layout (the same weights; see ``fused_channels_last`` for when inference runs it).

        It shares the parameters fusion leaves alone with ``net``: move or cast the model
        (``to``, ``half``), not the copy. Rebuilt when a sample of ``net``'s tensors shows new
        values (``fused_net`` (module ``fused_net``) lists what is seen); after editing weights through
        ``tensor.data``, call ``fuse()`` to fold them anew.
        """
        self.require_pytorch("fuse")
        if self._fused.stale(self.net):
            self.drop_fused("weights changed since the fused copy was built")
        if self._fused.net is None:
            self._fused.build(self.net)
        assert self._fused.net is not None  # built just above
        return self._fused.channels_last() if channels_last else self._fused.net

    def inference_net(self, fuse: bool | None = None) -> nn.Module:
        """The network inference runs: the fused copy when ``wants_fuse(fuse)`` (its channels_last
        twin when ``fused_channels_last``), else ``net`` as it is."""
        return self.fused_net(self.fused_channels_last) if self.wants_fuse(fuse) else self.net

    @property
    def fused_channels_last(self) -> bool:
        """Whether fused inference runs in channels_last: with fp16 weights on CUDA, eager and
        graphed alike (a graph replays exactly what the eager call computes).

        Measured on an H200 (YOLOv9-t fused, 640 px, graphed; docs/benchmarks.md): fp16 2.18 ms
        against 2.64 NCHW at batch 1, 10.3 against 11.7 at 32; fp32 2.84 against 2.73 at batch 1
        (12.1 against 13.4 at 32), so fp32 stays NCHW, where its batch-1 latency is best."""
        return self.runtime is None and self.device.type == "cuda" and self.dtype == torch.float16

    @property
    def fused(self) -> bool:
        """True while a current fused inference copy is held."""
        return self._fused.net is not None and not self._fused.stale(self.net)

    def drop_fused(self, reason: str) -> None:
        """Forget the fused copy and its graphs (weights changed, or ``fuse(False)``); the next fused
        inference builds a new one from the weights of then."""
        if self._fused.drop():
            self.graphs.release_fused()
            log.debug("fused inference copy dropped: %s", reason)

    def n_parameters(self) -> int:
        return sum(p.numel() for p in self.net.parameters())

    def info(self) -> dict[str, Any]:
        """Family, size, task, classes, image size, parameter count, device, source checkpoint."""
        decl = self.spec.task(self.task)
        return {"family": self.spec.name, "model": self.spec.weight_name(self.size, self.task, ""),
                "size": self.size, "task": self.task, "nc": self.nc, "imgsz": self.imgsz,
                "parameters": self.n_parameters(), "device": str(self.device), "dtype": str(self.dtype),
                "fused": self.fused, "fuse_by_default": self.wants_fuse(), "checkpoint": str(self.ckpt_path) if self.ckpt_path else None,
                "loss_names": list(decl.loss_names),
                "inference_capture_verified": decl.inference_capture, "train_capture_verified": decl.train_capture,
                "exportable": decl.exportable, **(self.runtime.describe() if self.runtime is not None else {})}

    def state_for_checkpoint(self, weights: dict[str, Tensor] | None = None) -> dict[str, Any]:
        """The schema's metadata plus the network weights (CPU tensors): ``weights`` when the
        caller already copied them (the trainer saves the EMA's), else this network's."""
        self.require_pytorch("save a checkpoint")
        meta = checkpoint_metadata(family=self.spec.name, size=self.size, task=self.task, nc=self.nc,
                                   names=self.names, imgsz=self.imgsz, version=__version__)
        meta["model"] = cpu_state_dict(self.net) if weights is None else weights
        return meta

    def save(self, path: str | Path) -> Path:
        """Write an upstream-compatible checkpoint atomically."""
        return atomic_save(self.state_for_checkpoint(), path)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickles as its checkpoint (CPU tensors): how multi-GPU workers receive the model."""
        return (_unpickle, (self.state_for_checkpoint(), str(self.ckpt_path) if self.ckpt_path else None))

    # ----------------------------------------------------------------- user verbs
    def predict(self, source: object, **options: Any) -> Any:
        """Predict on ``source``: images, folders, globs, arrays, videos, cameras, URLs (see
        ``predict.streams`` for the list and the stream API).

        Options (``PredictConfig``): conf, iou, imgsz, classes, max_det, agnostic_nms, batch, save,
        save_txt, save_conf, save_crop, show, device (default: cuda:0 when there is a GPU and the
        model is on the CPU), half (fp16 weights), fuse (None: the model's choice, see ``fuse()``;
        False: the exact unfused forward), cuda_graph (False | True |
        "auto"), stream, vid_stride, project, name, verbose. Returns one ``Results`` per image or
        frame: a list, or with ``stream=True`` a generator.
        """
        from .predict.predictor import run_prediction

        cfg = load_config(PredictConfig, options, "predict()")
        if cfg.cuda_graph is not False:
            self.require_pytorch(f"predict(cuda_graph={cfg.cuda_graph!r})")
        return run_prediction(self, source, cfg)

    __call__ = predict

    def track(self, source: object, *, tracker: str = "bytetrack", stream: bool = False, persist: bool = False,
              **options: Any) -> list[Results] | Iterator[Results]:
        """Follow objects through a video, stream or sequence of frames (detect models only).

        Predicts frame by frame and feeds every frame's boxes, the weak ones included (predict
        runs at the tracker's low threshold), to one tracker per source; the tracker restarts,
        ids from 1, when the source changes. Each ``Results`` keeps only tracked boxes, with
        ``boxes.id`` (int64, stable per object, never reused by one tracker) and ``trails``.

        Args:
            source: what ``predict`` takes; a video or stream is tracked frame by frame, and
                still images of one call form one sequence.
            tracker: a name from ``track.TRACKERS`` (``"bytetrack"``).
            stream: return a lazy generator instead of a list (long videos, cameras).
            persist: continue the tracks of this model's previous ``track`` call (calling
                ``track(frame, persist=True)`` once per frame of your own loop).
            **options: the tracker's settings (``ByteTrackConfig``: track_high_thresh,
                track_low_thresh, new_track_thresh, track_buffer, match_thresh, fuse_score) and
                predict's (``conf`` then filters the tracked boxes for output; ``save`` writes
                frames with ids and trails, a video per video source, to runs/track).

        Raises:
            ConfigError: not a detect model, an unknown tracker or option, a bad value.
        """
        from .track.runner import start_tracking

        frames = start_tracking(self, source, tracker=tracker, persist=persist, options=options)
        return frames if stream else list(frames)

    def train(self, **options: Any) -> Any:
        """Train on ``data`` (see ``train.settings.TrainConfig``); the instance ends with the best weights."""
        from .train.entry import train_model

        self.require_pytorch("train")
        self.drop_fused("training")  # frees its memory for the run; rebuilt from the trained weights
        try:
            return train_model(self, options)
        finally:
            self.drop_fused("trained")

    def val(self, **options: Any) -> Any:
        """Validate on ``data``'s ``split`` (see ``val.settings.ValConfig``); returns the metrics."""
        from .val.entry import validate_model

        return validate_model(self, options)

    def export(self, **options: Any) -> Path:
        """Write the inference seam as ``format`` = ``"onnx"`` | ``"torchscript"`` | ``"openvino"``
        (see ``export.ExportConfig``: imgsz, batch, dynamic, half, simplify, opset, device, file).
        Returns the file written (OpenVINO: its folder); ``LibreYOLO(path)`` loads it back."""
        from .export import export_model

        self.require_pytorch("export")
        return export_model(self, options)

    # ----------------------------------------------------------------- CUDA graphs
    def capture_graph(self, imgsz: int | None = None, batch: int = 1, dtype: torch.dtype | None = None,
                      fuse: bool | None = None) -> dict:
        """Capture the inference graph for ``batch x 3 x imgsz x imgsz`` ahead of the first request
        (of the network ``predict(fuse=fuse)`` runs)."""
        self.require_pytorch("capture CUDA graphs")
        return capture_ahead(self, imgsz=imgsz or self.imgsz, batch=batch, dtype=dtype, fuse=fuse)

    def graph_info(self) -> dict[str, Any]:
        """Whether capture is supported here, the captured graphs, replay counts, and the mode."""
        return self.graphs.describe()

    def release_graphs(self) -> None:
        """Free every captured graph and its memory, and what ``compile=`` compiled."""
        self.graphs.release()

    def invalidate_cuda_graph(self, reason: str) -> None:
        """Drop captured graphs because what they captured changed (weights, device, dtype, a
        head branch switched on); the next call recaptures per the mode."""
        self.graphs.invalidate(reason)

    def __repr__(self) -> str:
        return (f"LibreYOLO({self.spec.name}-{self.size} {self.task}, nc={self.nc}, imgsz={self.imgsz}, "
                f"device={self.device}, params={self.n_parameters():,})")


class _SeamModule(nn.Module):
    """Holds the network as a submodule (so DDP, graph capture and compile see its parameters)
    and runs one of the graph seams."""

    def __init__(self, net: nn.Module, seam: Any) -> None:
        super().__init__()
        self.net = net
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


def _unpickle(ckpt: dict[str, Any], path: str | None) -> LibreYOLO:
    from .zoo.building import rebuild_source

    model = LibreYOLO.__new__(LibreYOLO)
    model.metrics = None
    model._assemble(rebuild_source(ckpt, path))
    return model
