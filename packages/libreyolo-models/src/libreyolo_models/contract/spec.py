"""A family's declarations as data: what it supports is read from here, never from code paths.

A family folder declares one ``FamilySpec`` in its ``spec.py`` (no torch import there, so the
registry, the CLI's ``--help`` and ``libreyolo info`` stay cheap). The implementation class (the
``Family`` protocol of ``contract.family``) is named by a loader function, imported on first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..config import suggest
from ..errors import ConfigError

if TYPE_CHECKING:
    from .family import Family

# Weight-file suffix per task, as upstream names its files (detect has none).
TASK_SUFFIXES = {"detect": "", "segment": "-seg", "semantic": "-sem", "pose": "-pose",
                 "classify": "-cls", "obb": "-obb", "point": "-point", "restore": "-restore", "depth": "-depth",
                 "prompt-segment": "-promptseg", "ocr": "-ocr",
                 "matte": "-matte"}

# Recipe values counted in epochs, which ``TaskDecl.recipe_shares`` may cap to a share of the run.
RUN_LENGTH_KEYS = ("warmup_epochs", "close_mosaic")

# The shares a COCO-length recipe (warmup and mosaic-free epochs sized for ~300 epochs) declares:
# a short run caps each to 30 % of its epochs (the share the trainer's warmup floor uses), so 12
# epochs warm up for at most 3.6 and close mosaic for the last 4 instead of all of them.
SHORT_RUN_SHARES: dict[str, float] = {"warmup_epochs": 0.3, "close_mosaic": 0.3}

# Where upstream LibreYOLO publishes weights: <hub>/<org>/<stem>/resolve/main/<stem>.pt.
HUB_ORG = "LibreYOLO"


@dataclass(frozen=True)
class TaskDecl:
    """What a family declares for one task it implements.

    Attributes:
        loss_names: the named terms ``compute_loss`` returns, in order (``results.csv`` columns
            ``train/<name>_loss``).
        loss_gains: default weight of each term (keys are loss names); ``train(box=..., gains=...)``
            overrides them and rejects names the family does not have.
        default_imgsz: training and inference size when none is given (``imgsz_by_size`` wins).
        imgsz_by_size: per-size default image sizes (YOLOX n/t train at 416).
        inference_capture: ``predict(cuda_graph=...)`` is allowed. True only where the family's
            inference row of ``docs/parity-matrix.md`` is green.
        train_capture: ``train(cuda_graph=True)`` captures; else it trains eagerly (logged).
        half_weights: eager CUDA AMP training runs its forward on fp16 copies of the convolution and
            linear weights, refreshed once per optimizer step, instead of autocast casting each weight
            on every forward (``train.half_weights``: bit-identical, ~470 fewer operations a
            YOLOv9-t step). True only where each such layer runs once per training forward, its
            weights reach only autocast's fp16 ops, and nothing in the forward reads a parameter's
            dtype (``tests/test_half_weights.py`` checks a family bit for bit).
        inference_fuse: predict, track and streams run a BatchNorm-folded copy of the network by
            default (``LibreYOLO.fuse``; ``fuse=False`` keeps the exact forward). True only where
            the fused network was checked against the unfused one (same detections to rounding).
        recipe: training defaults of this family, as ``TrainConfig`` values (``{"optimizer":
            "AdamW", "lr0": 1e-4}``). The user's options win; the merged values are what
            ``args.yaml`` records.
        recipe_shares: recipe values counted in epochs (``warmup_epochs``, ``close_mosaic``) that
            must scale down with a short run: each is capped to this share of the run's epochs
            unless the user sets it. Upstream recipes are written for COCO-length runs (YOLOX:
            5 warmup and 15 mosaic-free epochs of 300), which a 12-epoch run on a small set would
            otherwise spend mostly warming up, or never train with mosaic at all.
        exportable: ``model.export()`` writes the inference seam (``inference_forward``) to ONNX,
            TorchScript and OpenVINO; the family's ``postprocess`` (NMS, thresholds) always stays
            outside the exported graph and runs in Python on the runtime's outputs.
        export_note: why the task does not export, when ``exportable`` is False (shown to users).
        export_formats: the formats it exports to, when not every one (an operator some converters
            lack); None: all. ``export_formats_note`` says why the others are refused.
        min_opset: the first ONNX opset with every operator the network needs (an export asking
            for less is refused; without ``opset=`` it is used when above the default 17).
        dynamic_imgsz: ``export(dynamic=True)`` frees the image size as well as the batch: the
            seam computes everything size-dependent (anchor grids, position embeddings) from the
            input's shape, so a trace generalises. False where something is laid out for the
            traced size; such an export keeps a dynamic batch at a fixed ``imgsz`` and says why.
            Every family claiming True is checked at two sizes in ``tests/test_export_families.py``.
        dynamic_imgsz_note: why the image size cannot be dynamic, when ``dynamic_imgsz`` is False.
        default_nc: classes of an untrained model when neither ``nc`` nor ``names`` is given
            (80, COCO, for detectors; 1000, ImageNet, for classifiers, so a fresh model has the
            reference architecture's shapes).
        stride: image sides must be multiples of this for this task; None: the family's
            ``FamilySpec.stride``. For a task whose network tiles the image differently (RF-DETR
            segment: 12-pixel patches in 2 x 2 windows, so multiples of 24).
        default_keypoints: keypoints per instance of an untrained pose model when the data does
            not say otherwise (17: COCO's person); None for tasks without keypoints.
        sizes: the sizes this task builds when not all of the family's (YOLO-NAS: its pose network
            comes in n, s, m and l, its detector in s, m and l); None: every size.
    """

    loss_names: tuple[str, ...]
    loss_gains: Mapping[str, float] = field(default_factory=dict)
    default_imgsz: int = 640
    imgsz_by_size: Mapping[str, int] = field(default_factory=dict)
    inference_capture: bool = False
    train_capture: bool = False
    half_weights: bool = False
    inference_fuse: bool = False
    recipe: Mapping[str, object] = field(default_factory=dict)
    recipe_shares: Mapping[str, float] = field(default_factory=dict)
    exportable: bool = True
    export_note: str = ""
    export_formats: tuple[str, ...] | None = None
    export_formats_note: str = ""
    min_opset: int | None = None
    dynamic_imgsz: bool = True
    dynamic_imgsz_note: str = ""
    default_nc: int = 80
    stride: int | None = None
    default_keypoints: int | None = None
    sizes: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.stride is not None and (isinstance(self.stride, bool) or self.stride < 1):
            raise ConfigError(f"stride={self.stride!r} must be a positive number of pixels (or None: the family's)")
        if not self.exportable and not self.export_note:
            raise ConfigError("a task declared exportable=False needs export_note saying why")
        if self.export_formats is not None and not self.export_formats_note:
            raise ConfigError("a task declaring export_formats needs export_formats_note saying why the others fail")
        if not self.dynamic_imgsz and not self.dynamic_imgsz_note:
            raise ConfigError("a task declared dynamic_imgsz=False needs dynamic_imgsz_note saying why")
        for key, share in self.recipe_shares.items():
            if key not in RUN_LENGTH_KEYS:
                raise ConfigError(f"recipe_shares names {key!r}; only epoch counts scale with the run: "
                                  f"{', '.join(RUN_LENGTH_KEYS)}")
            if not 0.0 < share <= 1.0:
                raise ConfigError(f"recipe_shares[{key!r}]={share} must be in (0, 1]: a share of the run's epochs")
        unknown = set(self.loss_gains) - set(self.loss_names)
        if unknown:
            raise ConfigError(f"loss_gains names {sorted(unknown)} that are not in loss_names {self.loss_names}")


@dataclass(frozen=True)
class WeightsEntry:
    """One published weights file.

    Attributes:
        size, task: what it holds.
        file: the file name users type (``LibreYOLO9t.pt``).
        url: where the hub serves it; relative to the hub endpoint when it does not start with a
            scheme (``LibreYOLO/LibreYOLO9t/resolve/main/LibreYOLO9t.pt``).
        sha256: the file's digest, checked before the file is used. None where it could not be
            recorded when the table was written: the hub's own published digest is used then.
        nc: class count of the checkpoint; names: its class names (None: COCO for 80).
    """

    size: str
    task: str
    file: str
    url: str
    sha256: str | None = None
    nc: int = 80
    names: tuple[str, ...] | None = None


@dataclass(frozen=True)
class FamilySpec:
    """Everything a family declares.

    Attributes:
        name: registry key and checkpoint ``model_family`` (``"yolo9"``).
        display_name: for messages (``"YOLOv9"``).
        weight_prefix: weight file names are ``<prefix><size>[-<task>].pt`` (``LibreYOLO9t.pt``).
        sizes: the sizes it can build; ``default_size`` is used when none is given.
        tasks: per task it implements, its declarations (the first is the default task).
        stride: the largest downsampling of the network: image sizes must be multiples of it.
        mean, std: input normalisation applied inside the graph seams to RGB in [0, 1]
            (``(x - mean) / std``); YOLO families use none.
        ddp_autospawn: ``train(device="0,1")`` spawns workers itself (else: use torchrun).
        sync_bn_default: SyncBatchNorm on by default under DDP.
        weights: the published weights, one entry per (size, task).
        implementation: the class implementing the ``Family`` protocol, as ``"module:Class"``
            (imported on first use, so the declaration stays free of torch), or a class, or a
            function returning it (a family defined in a test or a plugin).
        summary: one line for ``libreyolo info`` listings.
        weights_note: where weights come from when none are published in our format (an official
            download to load by path, a converter), said when a weights file is not found.
    """

    name: str
    display_name: str
    weight_prefix: str
    sizes: tuple[str, ...]
    default_size: str
    tasks: Mapping[str, TaskDecl]
    implementation: str | type[Family] | Callable[[], type[Family]]
    stride: int = 32
    mean: tuple[float, float, float] | None = None
    std: tuple[float, float, float] | None = None
    ddp_autospawn: bool = False
    sync_bn_default: bool = True
    weights: tuple[WeightsEntry, ...] = ()
    summary: str = ""
    weights_note: str = ""

    def __post_init__(self) -> None:
        if self.default_size not in self.sizes:
            raise ConfigError(f"{self.name}: default_size {self.default_size!r} is not one of {self.sizes}")
        if not self.tasks:
            raise ConfigError(f"{self.name}: a family declares at least one task")
        for task, decl in self.tasks.items():
            if decl.sizes is not None and (not decl.sizes or set(decl.sizes) - set(self.sizes)):
                raise ConfigError(f"{self.name}: task {task!r} declares sizes {decl.sizes}, which must be some of "
                                  f"the family's {self.sizes}")
        for entry in self.weights:
            if entry.task not in self.tasks or entry.size not in self.sizes_for(entry.task):
                raise ConfigError(f"{self.name}: weights entry {entry.file} names size {entry.size!r} / task "
                                  f"{entry.task!r}, which the family does not declare")

    def family_class(self) -> type[Family]:
        """The class implementing this family (``implementation``, imported now if named)."""
        impl = self.implementation
        if isinstance(impl, str):
            module, _, name = impl.partition(":")
            found = getattr(importlib.import_module(module), name, None)
            if found is None:
                raise ConfigError(f"{self.name}: implementation {impl!r} names no class {name!r} in {module}")
            return found
        if isinstance(impl, type):
            return impl
        return impl()

    @property
    def default_task(self) -> str:
        return next(iter(self.tasks))

    def task(self, task: str) -> TaskDecl:
        """The declarations for ``task``; ConfigError naming the family's tasks otherwise."""
        if task not in self.tasks:
            raise ConfigError(f"{self.display_name} has no task {task!r}; tasks: {', '.join(self.tasks)}")
        return self.tasks[task]

    def sizes_for(self, task: str) -> tuple[str, ...]:
        """The sizes ``task`` builds: its declared ``sizes``, else every size of the family."""
        return self.task(task).sizes or self.sizes

    def check_size(self, size: str, task: str, source: str) -> None:
        """Raise ConfigError (naming ``source``) unless ``task`` builds ``size``."""
        sizes = self.sizes_for(task)
        if size in sizes:
            return
        if size in self.sizes:
            others = [t for t in self.tasks if size in self.sizes_for(t)]
            raise ConfigError(f"{source}: {self.display_name} {task} comes in sizes {', '.join(sizes)}; size "
                              f"{size!r} is {' and '.join(others)} only (task={others[0]!r})")
        raise ConfigError(f"{source}: {self.display_name} has no size {size!r}; sizes: {', '.join(self.sizes)}"
                          + suggest(str(size), self.sizes))

    def default_imgsz(self, size: str, task: str) -> int:
        decl = self.task(task)
        return int(decl.imgsz_by_size.get(size, decl.default_imgsz))

    def weight_name(self, size: str, task: str | None = None, suffix: str = ".pt") -> str:
        """``<prefix><size>[-<task suffix>]<suffix>``; the default task has no task suffix
        (``LibreYOLO9t.pt`` detects, ``LibreSegFormerb0.pt`` segments, ``LibreResNet50.pt`` classifies)."""
        task = task or self.default_task
        tag = "" if task == self.default_task else TASK_SUFFIXES.get(task, f"-{task}")
        return f"{self.weight_prefix}{size}{tag}{suffix}"

    def weights_entry(self, size: str, task: str | None = None) -> WeightsEntry:
        """The published weights of (size, task): the table's entry, else upstream's naming rule."""
        task = task or self.default_task
        for entry in self.weights:
            if entry.size == size and entry.task == task:
                return entry
        file = self.weight_name(size, task)
        stem = file.removesuffix(".pt")
        return WeightsEntry(size=size, task=task, file=file, url=f"{HUB_ORG}/{stem}/resolve/main/{file}")

    def stride_for(self, task: str | None = None) -> int:
        """The multiple image sides must be for ``task`` (its ``TaskDecl.stride``, else the family's)."""
        decl = self.tasks.get(task or self.default_task)
        return decl.stride if decl is not None and decl.stride is not None else self.stride

    def check_imgsz(self, imgsz: int, source: str = "imgsz", task: str | None = None) -> int:
        """``imgsz`` if it is a positive multiple of ``task``'s stride (``stride_for``), else a
        ConfigError naming the nearest."""
        return check_multiple(imgsz, self.stride_for(task), source)


MAX_IMGSZ = 16384
"""The largest image size a job takes. One 3-channel image at 16384 px is 3 GiB as the network's
float input, before its first feature map; far past it an allocator fails with a raw message
(``imgsz=100000``: 112 GiB), so the size is refused up front, naming it."""


def check_multiple(imgsz: int, stride: int, source: str = "imgsz") -> int:
    """Image sizes must be positive multiples of the network stride, at most ``MAX_IMGSZ``."""
    if isinstance(imgsz, int) and not isinstance(imgsz, bool) and imgsz > MAX_IMGSZ:
        gib = 3 * imgsz * imgsz * 4 / 2**30
        raise ConfigError(f"{source}={imgsz} is larger than {MAX_IMGSZ} px: one image alone would take {gib:.0f} GiB "
                          "as the network's input; use a smaller imgsz (640-1280 is usual), or tile the image")
    if isinstance(imgsz, bool) or not isinstance(imgsz, int) or imgsz <= 0 or imgsz % stride:
        value = imgsz if isinstance(imgsz, int) else 0
        lower = max(stride, value // stride * stride)
        upper = max(stride, (value // stride + 1) * stride)
        options = sorted({lower, upper})
        raise ConfigError(f"{source}={imgsz!r} must be a positive multiple of {stride}; use "
                          + " or ".join(map(str, options)) + " (the network's stride)")
    return imgsz
