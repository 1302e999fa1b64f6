"""``LibreYOLO``: the one class users touch. It owns a ``ModelHandle`` (the network and the
model's identity) and runs the jobs on it: each job reads the handle and returns its result;
the facade applies what comes back (the best weights after training, the metrics of a
validation, a tracking session to continue).

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
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from .checkpoint import atomic_save
from .config import load_config
from .contract.family import Family, TensorTree
from .contract.spec import FamilySpec
from .errors import ConfigError, LibreYOLOError, abbreviated
from .graphs import ModelGraphs, capture_ahead
from .handle import ModelHandle
from .job_guard import JobGuard
from .runtime import RuntimeNetwork, is_exported
from .settings import PredictConfig
from .zoo.building import ModelSource, rebuild_source, resolve_source

if TYPE_CHECKING:
    from .benchmark import BenchmarkResult
    from .tasks import Task
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
        device: where to put the network (default: the CPU; each job then moves it to the best
            device available unless told otherwise, see ``devices.default_device``).
    """

    def __init__(self, model: str | Path | None = None, *, family: str | FamilySpec | None = None,
                 size: str | None = None, task: str | None = None, nc: int | None = None,
                 names: Mapping[int, str] | list[str] | None = None, imgsz: int | None = None,
                 device: str | int | torch.device | None = None, keypoints: int | None = None) -> None:
        self.metrics: Any = None
        """What the last ``val()`` returned (None before any)."""
        self.callbacks: list[Any] = []
        """Training callbacks added by ``add_callback`` (every ``train()`` of this model gets them)."""
        self.track_session: TrackSession | None = None
        """What ``track(persist=True)`` continues."""
        self._guard = JobGuard()  # one train() at a time, no other job during it (job_guard says why)
        try:
            if is_exported(model):
                if size is not None or nc is not None or names is not None or task is not None or keypoints is not None:
                    raise ConfigError(f"size/task/nc/names describe an untrained model; {str(model)!r} is an "
                                      "exported model whose metadata sets them")
                self._model = ModelHandle.from_exported(Path(str(model)), family, imgsz)
            else:
                self._model = ModelHandle.from_source(resolve_source(model, family=family, size=size, task=task,
                                                                     nc=nc, names=names, imgsz=imgsz,
                                                                     keypoints=keypoints))
        except OSError as err:  # a name too long, a loop of links, no permission: not a missing model
            if isinstance(err, LibreYOLOError):
                raise
            raise ConfigError(f"model={abbreviated(str(model))!r} cannot be read: {err.strerror or err}") from None
        if device is not None:
            self.to(device)

    @property
    def handle(self) -> ModelHandle:
        """What the jobs run on: the network, its identity, placement and graphs."""
        return self._model

    def _replace(self, handle: ModelHandle, reason: str) -> None:
        """Swap in a new handle (new weights, classes or network): the old one's graphs are
        invalidated for ``reason`` and their memory freed (graphs bake in tensor addresses)."""
        old = self._model
        if handle is not old:
            old.graphs.invalidate(reason)
            old.drop_fused(reason)
            old.graphs.release()
        self._model = handle

    # ----------------------------------------------------------------- identity
    @property
    def spec(self) -> FamilySpec:
        return self._model.spec

    @spec.setter
    def spec(self, spec: FamilySpec) -> None:
        """Swap the declarations of the same family (tests and tools that state a capture verified)."""
        if spec.name != self._model.spec.name:
            raise ConfigError(f"spec of family {spec.name!r} cannot replace {self._model.spec.name!r}'s; build a "
                              f"new model with LibreYOLO(family={spec.name!r})")
        self._model._declare(spec)

    @property
    def family(self) -> Family:
        return self._model.family

    @property
    def size(self) -> str:
        return self._model.size

    @property
    def task(self) -> str:
        return self._model.task

    @property
    def nc(self) -> int:
        return self._model.nc

    @property
    def names(self) -> dict[int, str]:
        return self._model.names

    @property
    def keypoints(self) -> int | None:
        """Keypoints per object of a pose model (None for other tasks)."""
        return self._model.keypoints

    @property
    def imgsz(self) -> int:
        return self._model.imgsz

    @property
    def net(self) -> nn.Module:
        return self._model.net

    @property
    def runtime(self) -> RuntimeNetwork | None:
        return self._model.runtime

    @property
    def checkpoint(self) -> Mapping[str, Any]:
        return self._model.checkpoint

    @property
    def ckpt_path(self) -> Path | None:
        return self._model.ckpt_path

    @property
    def graphs(self) -> ModelGraphs:
        return self._model.graphs

    @property
    def task_spec(self) -> Task:
        """The task's declarations and verbs (data, metrics, results)."""
        return self._model.task_spec

    @property
    def device(self) -> torch.device:
        return self._model.device

    @property
    def dtype(self) -> torch.dtype:
        return self._model.dtype

    @property
    def runs_only_on(self) -> str | None:
        """The device type an exported file is bound to (a TorchScript trace), else None."""
        return self._model.runs_only_on

    def resolve_imgsz(self, imgsz: int | None = None, source: str = "imgsz") -> int:
        return self._model.resolve_imgsz(imgsz, source)

    def require_pytorch(self, action: str) -> None:
        self._model.require_pytorch(action)

    def n_parameters(self) -> int:
        return self._model.n_parameters()

    def info(self) -> dict[str, Any]:
        """Family, size, task, classes, image size, parameter count, device, source checkpoint."""
        return self._model.info()

    # ----------------------------------------------------------------- graph seams
    def inference_forward(self, images: Tensor, net: nn.Module | None = None) -> TensorTree:
        """The inference seam (``ModelHandle.inference_forward``)."""
        return self._model.inference_forward(images, net)

    def training_forward(self, images: Tensor) -> TensorTree:
        """The training seam (the network half that training capture records)."""
        return self._model.training_forward(images)

    def training_module(self) -> nn.Module:
        return self._model.training_module()

    def inference_module(self, net: nn.Module | None = None) -> nn.Module:
        return self._model.inference_module(net)

    # ----------------------------------------------------------------- placement and weights
    def to(self, device: str | int | torch.device) -> LibreYOLO:
        """Move the network; captured graphs are dropped when the device changes."""
        self._model.to(device)
        return self

    def half(self) -> LibreYOLO:
        """fp16 weights (GPU inference); captured graphs are dropped."""
        self._model.half()
        return self

    def float(self) -> LibreYOLO:
        """fp32 weights; captured graphs and the fused copy (fp16 rounded) are dropped."""
        self._model.float()
        return self

    def quantize(self, recipe: str) -> LibreYOLO:
        """Inference weights in fewer bits: ``"fp16"``, ``"bf16"`` (every weight cast) or ``"int8"``
        (weight-only, linear layers; linear-heavy families only, others are refused by name). Graphs
        are dropped and recaptured on the next graphed predict; a recipe this device cannot run is
        refused with the weights left as they were. See ``quantize.py``."""
        from .quantize import quantize_model

        quantize_model(self._model, recipe)
        return self

    def dequantize(self) -> LibreYOLO:
        """Restore the fp32 weights ``quantize`` kept, bit for bit; graphs are dropped."""
        from .quantize import dequantize_model

        dequantize_model(self._model)
        return self

    def eval(self) -> LibreYOLO:
        self._model.net.eval()
        return self

    def rebuild(self, *, nc: int | None = None, keep_weights: bool = True) -> None:
        """A new network (and family) for ``nc`` classes on the same device. With ``keep_weights``
        every weight whose shape still fits is carried over (all but the class outputs)."""
        self._replace(self._model.rebuilt(nc=nc, keep_weights=keep_weights), "network rebuilt")

    def load(self, weights: str | Path) -> LibreYOLO:
        """Load weights into this model (same family; size, task and nc come from the checkpoint),
        on the device the model is on. Captured graphs are dropped: graphs bake in addresses."""
        self._model.require_pytorch("load PyTorch weights into it")
        self._take_source(resolve_source(weights, family=self._model.spec))
        return self

    def _take_kept(self, ckpt: dict[str, Any]) -> None:
        """Load a checkpoint held in memory (``train(save=False)``'s best weights) as ``load``
        loads a file, its record kept."""
        self._take_source(replace(rebuild_source(ckpt, None), checkpoint=ckpt), "kept in memory (save=False)")
        log.info("model now holds the best epoch's weights (epoch %s; save=False wrote no file)",
                 int(ckpt.get("epoch", -1)) + 1)

    def _take_source(self, source: ModelSource, where: str | None = None) -> ModelHandle:
        """Replace the network with ``source``'s, on this model's device and with its fuse default."""
        handle = ModelHandle.from_source(source, fuse_default=self._model.fuse_default)
        handle.to(self._model.device)
        self._replace(handle, f"new weights loaded from {where or handle.ckpt_path}")
        return handle

    def state_for_checkpoint(self, weights: dict[str, Tensor] | None = None) -> dict[str, Any]:
        return self._model.state_for_checkpoint(weights)

    def save(self, path: str | Path) -> Path:
        """Write an upstream-compatible checkpoint atomically."""
        return atomic_save(self._model.state_for_checkpoint(), path)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickles as its checkpoint (CPU tensors), through its handle."""
        return (_from_handle, (self._model,))

    # ----------------------------------------------------------------- fusion
    def fuse(self, enable: bool = True) -> LibreYOLO:
        """Choose whether predict, track and streams run the fused network by default.

        Fusing folds BatchNorm into the convolutions and merges re-parameterizable branches:
        fewer, larger kernels, the same results up to rounding (not bit for bit; see
        ``layers.fuse``). It happens on a separate inference copy (``fused_net()``), so the model
        still trains and saves; the copy is rebuilt when the weights change. ``fuse(True)`` folds
        the current weights now; ``fuse(False)`` drops it and makes the exact unfused forward the
        default. Without either call the family decides (``TaskDecl.inference_fuse``). A
        ``fuse=`` option of one ``predict``/``val`` call wins over both.
        """
        self._model.require_pytorch("fuse")
        self._model.fuse_default = bool(enable)
        if enable:
            self._model.drop_fused("fuse(True) folds anew")
            self._model.fused_net()
        else:
            self._model.drop_fused("fuse(False)")
        return self

    def wants_fuse(self, request: bool | None = None) -> bool:
        return self._model.wants_fuse(request)

    def fused_net(self, channels_last: bool = False) -> nn.Module:
        """The fused inference copy of ``net`` (``ModelHandle.fused_net``)."""
        return self._model.fused_net(channels_last)

    def inference_net(self, fuse: bool | None = None) -> nn.Module:
        return self._model.inference_net(fuse)

    @property
    def fused_channels_last(self) -> bool:
        return self._model.fused_channels_last

    @property
    def fused(self) -> bool:
        """True while a current fused inference copy is held."""
        return self._model.fused

    def drop_fused(self, reason: str) -> None:
        self._model.drop_fused(reason)

    # ----------------------------------------------------------------- user verbs
    def predict(self, source: object, **options: Any) -> Any:
        """Predict on ``source``: images, folders, globs, arrays, videos, cameras, URLs (see
        ``predict.streams`` for the list and the stream API).

        Options (``PredictConfig``): conf, iou, imgsz, classes, max_det, agnostic_nms, batch, save,
        save_txt, save_conf, save_crop, show, device (default: the model's accelerator, else the
        best one available, see ``devices.default_device``), half (fp16 weights), fuse (None: the
        model's choice, see ``fuse()``; False: the exact unfused forward), cuda_graph (False | True
        | "auto"), stream, vid_stride, project, name, verbose; for detect models tile, tile_overlap,
        tile_merge (sliced inference of large pictures, ``predict.tiling``) and augment (test-time
        flips and scales, ``predict.tta``). Returns one ``Results`` per image or frame: a list, or
        with ``stream=True`` a generator.
        """
        from .predict.predictor import run_prediction

        self._guard.refuse_while_training("predict")
        cfg = load_config(PredictConfig, options, "predict()")
        if cfg.cuda_graph is not False:
            self._model.require_pytorch(f"predict(cuda_graph={cfg.cuda_graph!r})")
        return run_prediction(self._model, source, cfg)

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

        self._guard.refuse_while_training("track")
        session, frames = start_tracking(self._model, source, tracker=tracker,
                                         previous=self.track_session if persist else None, options=options)
        self.track_session = session
        return frames if stream else list(frames)

    def add_callback(self, event: str | type, fn: Any) -> LibreYOLO:
        """Call ``fn(event)`` on one training event of every later ``train()``: a name from
        ``train.callbacks.CALLBACK_EVENTS`` (``"on_train_start"``, ``"on_train_batch_end"``,
        ``"on_fit_epoch_end"``, ``"on_train_end"``, ``"on_exception"``...) or the event class.
        A failing callback is logged and training goes on."""
        from .train.callbacks import EventCallback

        self.callbacks.append(EventCallback(event, fn))
        return self

    def train(self, **options: Any) -> Any:
        """Train on ``data`` (see ``train.settings.TrainConfig``); the instance ends with the best
        epoch's EMA weights (the last epoch's without validation), on the device it was on: loaded
        from ``best.pt``, or, with ``save=False``, from memory.

        One ``train()`` per model object at a time: a second one, and a predict, val, export or
        track of this object while it trains (from another thread), raise ``ModelBusyError``
        (``job_guard``); load the run's ``last.pt`` into another object to predict meanwhile."""
        from .train.entry import train_model

        if self.callbacks:
            options = {**options, "callbacks": [*self.callbacks, *(options.get("callbacks") or [])]}
        self._model.require_pytorch("train")
        with self._guard.training():
            self._model.drop_fused("training")  # frees its memory for the run; rebuilt from the trained weights
            try:
                outcome, trained = train_model(self._model, options)
                self._replace(trained, "network rebuilt for training")
                best = outcome.best or outcome.last
                if outcome.kept is not None:  # save=False: best.pt's contents, in memory
                    self._take_kept(outcome.kept)
                    outcome.kept = None
                elif best is not None and Path(best).is_file():
                    self.load(best)
                    log.info("model now holds the best weights: %s", best)
                return outcome
            finally:
                self._model.drop_fused("trained")

    def val(self, **options: Any) -> Any:
        """Validate on ``data``'s ``split`` (see ``val.settings.ValConfig``); returns the metrics
        (also kept as ``model.metrics``)."""
        from .val.entry import validate_model

        self._guard.refuse_while_training("val")
        self.metrics = validate_model(self._model, options)
        return self.metrics

    def export(self, **options: Any) -> Path:
        """Write the inference seam as ``format`` = ``"onnx"`` | ``"torchscript"`` | ``"openvino"`` |
        ``"ncnn"`` | ``"tflite"`` | ``"coreml"`` | ``"engine"`` (see ``export.ExportConfig``: imgsz,
        batch, dynamic, half, int8 with data=, simplify, opset, device, file). Returns the file
        written (OpenVINO, NCNN, TensorRT: the folder); ``LibreYOLO(path)`` loads it back (CoreML:
        on macOS only)."""
        from .export import export_model

        self._model.require_pytorch("export")
        self._guard.refuse_while_training("export")
        return export_model(self._model, options)

    def benchmark(self, **options: Any) -> BenchmarkResult:
        """Export to every format this machine runs and measure each: size, batch-1 latency and
        ``val`` metrics on ``data`` (default ``shapes``); see ``benchmark.BenchmarkConfig``.
        Returns a ``BenchmarkResult`` (``.rows``, ``.table()``)."""
        from .benchmark import run_benchmark

        self._guard.refuse_while_training("benchmark")
        return run_benchmark(self._model, options)

    # ----------------------------------------------------------------- CUDA graphs
    def capture_graph(self, imgsz: int | None = None, batch: int = 1, dtype: torch.dtype | None = None,
                      fuse: bool | None = None) -> dict:
        """Capture the inference graph for ``batch x 3 x imgsz x imgsz`` ahead of the first request
        (of the network ``predict(fuse=fuse)`` runs)."""
        self._model.require_pytorch("capture CUDA graphs")
        return capture_ahead(self._model, imgsz=self._model.resolve_imgsz(imgsz), batch=batch, dtype=dtype, fuse=fuse)

    def graph_info(self) -> dict[str, Any]:
        """Whether capture is supported here, the captured graphs, replay counts, and the mode."""
        return self._model.graphs.describe()

    def release_graphs(self) -> None:
        """Free every captured graph and its memory, and what ``compile=`` compiled."""
        self._model.graphs.release()

    def invalidate_cuda_graph(self, reason: str) -> None:
        """Drop captured graphs because what they captured changed (weights, device, dtype, a
        head branch switched on); the next call recaptures per the mode."""
        self._model.graphs.invalidate(reason)

    def __repr__(self) -> str:
        return f"LibreYOLO({self._model!r})"


def _from_handle(handle: ModelHandle) -> LibreYOLO:
    model = LibreYOLO.__new__(LibreYOLO)
    model.metrics = None
    model.callbacks = []
    model.track_session = None
    model._guard = JobGuard()
    model._model = handle
    return model
